// Register transposes shared by the packing loops of the f32 and bf16 products (private
// to ops/cpu). Packing a row-major operand into k-major slivers is a transpose; done 256
// values at a time in registers it costs a fraction of scalar strided stores.
#pragma once

#if defined(__AVX512F__) && !defined(GG_SCALAR)
#include <immintrin.h>

namespace gg {

// Transposes a 16 x 16 block held as 16 rows (r[i] = row i) in registers: 32-bit, then
// 64-bit interleaves, then two rounds of 128-bit lane shuffles. Packing a row-major
// operand into k-major slivers is a transpose; done 256 values at a time this way it costs
// a fraction of the scalar stride-MR stores (which took a large share of a mid-sized product).
inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16], v[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  auto lo = [](__m512 a, __m512 b) { return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))); };
  auto hi = [](__m512 a, __m512 b) { return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))); };
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = lo(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 1] = hi(t[4 * q + 0], t[4 * q + 2]);
    u[4 * q + 2] = lo(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = hi(t[4 * q + 1], t[4 * q + 3]);
  }
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j) {
      v[8 * h + j] = _mm512_shuffle_f32x4(u[8 * h + j], u[8 * h + 4 + j], 0x88);
      v[8 * h + 4 + j] = _mm512_shuffle_f32x4(u[8 * h + j], u[8 * h + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0xdd);
  }
}

// The same on 32-bit integers (bf16 pairs).
inline void transpose16(__m512i r[16]) {
  __m512 f[16];
  for (int i = 0; i < 16; ++i) f[i] = _mm512_castsi512_ps(r[i]);
  transpose16(f);
  for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(f[i]);
}

}  // namespace gg
#endif
