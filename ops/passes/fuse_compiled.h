// Fused groups compiled ahead of time. The fusion pass (ops/passes/fuse.h) runs a group by
// interpreting its program: each member is one pass over a buffer of values in L1. The
// same program can instead be evaluated one SIMD register at a time with every member's
// value in a register, each input read once and each stored value written once. That needs
// the program at compile time, so ops/passes/fused_programs.inc lists the programs that the
// reference models' plans make (GELU in both forms and its gradient, layer norm and its
// gradient, attention's masked softmax, residual sums): tools/gen_fused_programs.cpp writes
// it from those plans (compiled_entry below), and CTest's fused_programs fails while the
// committed table differs. A group whose program, stored members and input forms match an
// entry runs its compiled kernel, any other runs interpreted. Entries are matched by
// structure, never by op name.
//
// A row group runs row by row: consecutive full members as one loop over the row's
// registers, a row reduction (sum, max) as the unfused kernel's row function over the row
// of its operand (kept in the member's stored output or a scratch row), and the members of
// one value a row as scalars. Transcendental members of one value a row are not compiled
// (the interpreter splits them into SIMD body and scalar tail over rows), nor are inputs
// read in other patterns than the five forms below.
//
// Values are the interpreter's bit for bit: each member is one call of its element
// function (ops/primitives/elementwise_fn.h) on the same operands, its result rounded to float
// before the next member reads it (an empty asm hides it from the compiler, which would
// otherwise contract a product and a sum into one fused multiply-add); transcendental
// members see whole registers exactly where the interpreter's do (a row group's rows are
// whole registers; a flat group's last partial register is left to the interpreter).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ops/primitives/elementwise_fn.h"
#include "ops/passes/fuse.h"

namespace gg {


// The forms of a group's inputs, one letter an input, as the table writes them: F the group's
// shape (rows in order), B one row for every row (a bias), R one value a row, S one value,
// P a table of rows repeating along the last lead dim (a (T, T) mask over (B, H, T) rows).
// Empty when some input has another form, or a row group's rows are not whole registers.
std::string fused_input_forms(const Graph& g, const FusedGroup& group);

// The table entry matching the group (its program, stored members and input forms), or -1.
int find_compiled(const FusedGroup& group, const std::string& forms);

// Runs a group with its compiled kernel (group.compiled >= 0), as run_fused would.
void run_compiled(const FusedGroup& group, std::span<const View> in, View out, std::span<const View> stored,
                  std::int64_t begin, std::int64_t end, const RowLimits* limits = nullptr);

// The table line that would compile this group ("" when it is not element-wise only).
std::string compiled_entry(const FusedGroup& group, const std::string& forms);

// The table's entries, for tests: how many, and a group of entry i's program over a row
// space (rows, n) (flat: rows * n values) with the forms its inputs take.
int compiled_count();
FusedGroup compiled_group(int i, std::int64_t rows, std::int64_t n, std::string& forms);

// Runs a group by interpreting its program, whether or not it has a compiled kernel.
void run_fused_interpreted(const FusedGroup& group, std::span<const View> in, View out,
                           std::span<const View> stored, std::int64_t begin, std::int64_t end);

// The environment's default for ExecutorOptions::compiled: false when GG_COMPILED=0.
bool compiled_by_default();

}  // namespace gg
