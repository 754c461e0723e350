#!/usr/bin/env bash
# Data parallel over MPI, end to end (CTest's dist_* tests): one case per call.
#   run.sh <case> <dist_fit> <gradgraph> <work dir>
# Cases: equal (one process against 2 and 3 ranks, even and uneven shares), cli (the GPT of
# `gradgraph train`), jobs (train-vit and train-seq2seq), accum (accumulation under mpirun), resume (a checkpoint continued on
# another number of ranks), agree (ranks whose parameters part are stopped, naming the
# step), mismatch (ranks started with other options), kill (a rank killed mid-run).
# As root under CI: mpirun needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); --oversubscribe lets 3
# ranks share 2 cores; -q keeps mpirun's own banners out, so a rank's line is the report.
set -euo pipefail
case_name=$1 fit=$2 gg=$3 work=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpi() { local n=$1; shift; mpirun -q --oversubscribe -np "$n" "$@"; }
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
ck() { echo "$1/checkpoint.safetensors"; }
# One line on stderr, matching a pattern, and a non-zero status.
refused() {  # refused <err file> <status> <pattern>
  local lines; lines=$(grep -c . "$1" || true)
  [ "$2" -ne 0 ] || fail "exit status 0; stderr: $(cat "$1")"
  [ "$lines" -eq 1 ] || fail "$lines lines on stderr, not 1: $(cat "$1")"
  grep -q -- "$3" "$1" || fail "stderr does not say '$3': $(cat "$1")"
  [ "$(wc -c < "$1")" -le 301 ] || fail "a line of $(wc -c < "$1") bytes"
}

case $case_name in
equal)
  GG_NUM_THREADS=2 "$fit" train one 1 >/dev/null
  mpi 2 "$fit" train two 1 >/dev/null
  "$fit" compare "$(ck one)" "$(ck two)" 1e-6
  GG_NUM_THREADS=2 "$fit" train one15 1 --batch 15 --sgd >/dev/null  # shares of 7 and 8 rows
  mpi 2 "$fit" train two15 1 --batch 15 --sgd >/dev/null
  "$fit" compare "$(ck one15)" "$(ck two15)" 1e-6
  mpi 3 "$fit" train three 1 >/dev/null  # 5, 5 and 6 rows
  "$fit" compare "$(ck one)" "$(ck three)" 1e-6
  # Many steps: the same val loss within 1e-4, and run to run bit-identical for N = 2.
  GG_NUM_THREADS=2 "$fit" train long1 40 > long1.txt
  mpi 2 "$fit" train long2 40 > long2.txt
  mpi 2 "$fit" train long2b 40 > long2b.txt
  "$fit" compare "$(ck long2)" "$(ck long2b)" 0 || fail "two runs with 2 ranks differ"
  a=$(sed -n 's/final val loss //p' long1.txt) b=$(sed -n 's/final val loss //p' long2.txt)
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; print "val loss", a, b; exit !(d < 1e-4) }' ;;
cli)
  # SGD without clipping or momentum: the zero-initialised biases after one step are -lr
  # times the gradient, so this compares the global gradient itself. AdamW divides each
  # entry by its own magnitude plus eps = 1e-8, which magnifies round-off in entries near
  # eps (LayerNorm biases): there the parameters agree within 1e-5.
  common=(train --steps 1 --eval-interval 1000 --final-eval-iters 2 --sample-tokens 0 --quiet)
  sgd=(--optimizer sgd --momentum 0 --clip 0)
  GG_NUM_THREADS=2 "$gg" "${common[@]}" "${sgd[@]}" --out-dir one_sgd >/dev/null
  mpi 2 "$gg" "${common[@]}" "${sgd[@]}" --out-dir two_sgd >/dev/null
  "$fit" compare "$(ck one_sgd)" "$(ck two_sgd)" 1e-6
  GG_NUM_THREADS=2 "$gg" "${common[@]}" --out-dir one >/dev/null
  mpi 2 "$gg" "${common[@]}" --out-dir two > two.txt
  grep -q "data parallel: 2 ranks" two.txt || fail "no plan of the buckets: $(cat two.txt)"
  grep -q "MB all-reduced per step in 4 buckets; a step spends .* ms filling" two.txt || fail "no communication profile: $(cat two.txt)"
  "$fit" compare "$(ck one)" "$(ck two)" 1e-5 ;;
jobs)
  # The other training commands, unchanged, under mpirun: the same final figures as one process.
  vit=(train-vit --steps 60 --quiet)
  GG_NUM_THREADS=2 "$gg" "${vit[@]}" --out-dir v1 | grep "test accuracy" > v1.txt
  mpi 2 "$gg" "${vit[@]}" --out-dir v2 | grep "test accuracy" > v2.txt
  cmp v1.txt v2.txt || fail "train-vit: $(cat v1.txt) alone, $(cat v2.txt) under mpirun"
  # A loss averaged over unpadded tokens: ranks weighted by their tokens (DataSource::loss_terms).
  s2s=(train-seq2seq --task reverse --steps 40 --eval-interval 20 --held-out 100 --eval-examples 50 --d-model 16
       --n-head 2 --enc-layers 1 --dec-layers 1 --batch-size 16 --dropout 0 --quiet)
  GG_NUM_THREADS=2 "$gg" "${s2s[@]}" --out-dir s1 | grep "val loss" > s1.txt
  mpi 2 "$gg" "${s2s[@]}" --out-dir s2 | grep "val loss" > s2.txt
  cmp s1.txt s2.txt || fail "train-seq2seq: $(cat s1.txt) alone, $(cat s2.txt) under mpirun" ;;
accum)
  GG_NUM_THREADS=2 "$fit" train one 1 --batch 16 >/dev/null
  mpi 2 "$fit" train two 1 --batch 8 --accum 2 >/dev/null
  "$fit" compare "$(ck one)" "$(ck two)" 1e-6 ;;
resume)
  GG_NUM_THREADS=2 "$fit" train whole 6 >/dev/null
  mpi 2 "$fit" train a 3 >/dev/null && GG_NUM_THREADS=2 "$fit" train a 6 --resume >/dev/null
  "$fit" compare "$(ck whole)" "$(ck a)" 1e-5
  GG_NUM_THREADS=2 "$fit" train b 3 >/dev/null && mpi 2 "$fit" train b 6 --resume >/dev/null
  "$fit" compare "$(ck whole)" "$(ck b)" 1e-5
  [ "$(grep -c '^[0-9]' b/loss.csv)" -eq "$(grep -c '^[0-9]' whole/loss.csv)" ] || fail "the curves do not continue" ;;
agree)
  status=0; mpi 2 "$fit" train p 8 --perturb-at 2 --eval-interval 2 >/dev/null 2>err.txt || status=$?
  refused err.txt $status "after step 4 rank 1's parameters differ from rank 0's" ;;
mismatch)
  status=0; mpirun -q --oversubscribe -np 1 "$fit" train m 4 : -np 1 "$fit" train m 5 >/dev/null 2>err.txt || status=$?
  refused err.txt $status "rank 1 has option steps = 5 but rank 0 has 4"
  status=0; mpirun -q --oversubscribe -np 1 "$fit" train m 4 : -np 1 "$fit" train m 4 --seed 7 >/dev/null 2>err.txt || status=$?
  refused err.txt $status "rank 1 has option seed = 7 but rank 0 has 1337" ;;
kill)
  mpi 2 "$gg" train --steps 100000 --eval-interval 5 --eval-iters 2 --quiet --out-dir k >/dev/null 2>err.txt &
  job=$!
  for _ in $(seq 600); do [ -f "$(ck k)" ] && break; sleep 0.1; done
  [ -f "$(ck k)" ] || fail "no checkpoint after 60 s"
  sleep 1
  victim=""
  for p in $(pgrep -f "out-dir k" || true); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] || fail "rank 1 not found"
  t0=$(date +%s.%N)
  kill -9 "$victim"
  status=0; wait $job || status=$?
  t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "the job ended $t s after rank 1 was killed; stderr: $(cat err.txt)"
  awk -v t="$t" 'BEGIN { exit !(t < 30) }' || fail "took $t s"
  refused err.txt $status "rank 0: stopped: mpirun ended the job"
  grep -q "the last checkpoint (step [0-9]*) is in" err.txt || fail "the line does not say where the checkpoint is"
  "$fit" compare "$(ck k)" "$(ck k)" 0 ;;  # it loads: intact
*) fail "unknown case '$case_name'" ;;
esac
echo "PASS: $case_name"
