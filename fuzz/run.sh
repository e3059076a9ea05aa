#!/usr/bin/env bash
# Runs every fuzz target of alkit (or those named) with cargo-fuzz, one after another: each
# until 5,000,000 executions or MINUTES minutes (default 10), whichever comes first, on the
# corpus kept in fuzz/corpus/TARGET (new finds are added there). A crash stops the script
# with libFuzzer's report and the input in fuzz/artifacts/TARGET/.
#
#   cargo install cargo-fuzz            # once
#   fuzz/run.sh                         # all targets, 10 minutes or 5M runs each
#   MINUTES=1 fuzz/run.sh idx csv_pool  # two targets, briefly
#
# Needs nightly Rust (`rustup toolchain install nightly`). Built without a sanitizer: the
# code under test is safe Rust (alkit's `unsafe` lives in the kernels, which no parser
# reaches), and what is looked for is panics, aborts, hangs and out-of-proportion memory,
# which libFuzzer catches itself (-rss_limit_mb, -malloc_limit_mb, -timeout).
set -euo pipefail
cd "$(dirname "$0")"
MINUTES="${MINUTES:-10}"
RUNS="${RUNS:-5000000}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
# Built once, then the binaries are run directly (so that editing the sources while a long
# run goes on cannot rebuild or break it half-way).
cargo +nightly fuzz build -s none
bin=target/x86_64-unknown-linux-gnu/release
mkdir -p logs
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    echo "== $t"
    start=$(date +%s)
    "$bin/$t" -artifact_prefix="artifacts/$t/" "corpus/$t" \
        -runs="$RUNS" -max_total_time=$((MINUTES * 60)) \
        -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=20 \
        -print_final_stats=1 2>&1 | tee "logs/$t.log" | grep -E "^(#[0-9]+ +DONE|stat::|==|INFO: Running)" || true
    echo "   $(( $(date +%s) - start )) s"
    if grep -q "SUMMARY\|panicked\|ERROR: libFuzzer" "logs/$t.log"; then
        echo "!! $t crashed: see fuzz/logs/$t.log and fuzz/artifacts/$t/"
        exit 1
    fi
    # Keep the corpus small enough to live in the repository: the inputs that cover what the
    # whole corpus covers.
    rm -rf "corpus/$t.min" && mkdir "corpus/$t.min"
    "$bin/$t" -merge=1 "corpus/$t.min" "corpus/$t" >"logs/$t.merge.log" 2>&1
    rm -rf "corpus/$t" && mv "corpus/$t.min" "corpus/$t"
    echo "   corpus: $(ls "corpus/$t" | wc -l) inputs, $(du -sh "corpus/$t" | cut -f1)"
done
