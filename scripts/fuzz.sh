#!/usr/bin/env bash
# Coverage-guided fuzzing of sluice's untrusted inputs with libFuzzer (clang 14, Debian's
# packages), under AddressSanitizer + UndefinedBehaviorSanitizer. The targets are listed in
# fuzz/targets (one line each: adding a target is a line there plus fuzz/NAME.cpp).
#
#   scripts/fuzz.sh --list                       the targets, one a line
#   scripts/fuzz.sh --seconds N [TARGET...]      build, then run each target N seconds
#                                                (every target when none is named; 0: run
#                                                the corpus once, no fuzzing)
#   scripts/fuzz.sh --runs N [TARGET...]         each target N inputs from a fixed seed
#                                                (--seed, default 1): the same inputs on
#                                                every machine, which is what CI runs
# Options of a run:
#   --jobs J        run J targets at a time (default 1)
#   --fork K        run each target as K libFuzzer worker processes (-fork=K), which go
#                   on after a crash (each crash saved and counted): for long campaigns
#   --corpus DIR    keep each target's corpus in DIR/TARGET (default: a temporary dir,
#                   removed afterwards); the seeds of fuzz/corpus/TARGET are read, never
#                   written. New crashes go to DIR/../artifacts (default BUILD/artifacts).
#   --coverage      after the run, line coverage of the corpus reached, per target and
#                   for the library's sources (a second build with clang's source-based
#                   coverage, llvm-profdata-14 / llvm-cov-14)
#   --build DIR     the build directory (default build-fuzz)
#   --seed S        libFuzzer's random seed (with --runs; default 1)
# A long campaign, in the background, keeping what it found:
#   nice scripts/fuzz.sh --seconds 3600 --fork 2 --corpus ~/sluice-fuzz
#
# Prints one line a target (executions, coverage and features, corpus, crashes), and last
#   fuzz: T targets, E executions, C crashes
# Exits non-zero when C > 0 (or a target could not run). Installs what it needs with
# apt-get (scripts/install-deps.sh, then clang-14, its libFuzzer and the llvm tools).
set -euo pipefail

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

all_targets() { sed -e 's/#.*//' fuzz/targets | awk 'NF { print $1 }'; }

seconds='' runs='' seed=1 jobs=1 fork=0 corpus_root='' coverage=0 build=build-fuzz targets=()
while (($#)); do
    case $1 in
    --list) all_targets; exit 0 ;;
    --seconds) seconds=$2; shift ;;
    --runs) runs=$2; shift ;;
    --seed) seed=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --fork) fork=$2; shift ;;
    --corpus) corpus_root=$2; shift ;;
    --coverage) coverage=1 ;;
    --build) build=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1") ;;
    esac
    shift
done
if [[ -n $runs ]]; then
    [[ $runs =~ ^[0-9]+$ && $seed =~ ^[0-9]+$ && -z $seconds ]] ||
        { echo "fuzz: --runs N (and --seed S) are numbers, without --seconds" >&2; exit 2; }
else
    [[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz: --seconds N or --runs N is required (or --list)" >&2; exit 2; }
fi
known=$(all_targets)
((${#targets[@]})) || mapfile -t targets <<<"$known"
for t in "${targets[@]}"; do
    grep -qx -- "$t" <<<"$known" || { echo "fuzz: no target $t (see --list)" >&2; exit 2; }
done

# ---- what it needs -----------------------------------------------------------------------
scripts/install-deps.sh
need=(clang-14 libclang-rt-14-dev libfuzzer-14-dev llvm-14)
missing=()
for p in "${need[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true) == installed ]] || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "fuzz: installing ${missing[*]}"
    sudo=()
    ((EUID == 0)) || sudo=(sudo)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- build -------------------------------------------------------------------------------
# The library and the targets with libFuzzer's instrumentation, ASan and UBSan (clang does
# not link the sanitizer runtimes into shared libraries: b_lundef off). -O1 -g: what the
# sanitizers need for readable reports, at a speed that still counts.
configure() {
    local dir=$1
    shift
    if [[ -f $dir/meson-private/coredata.dat ]]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        CXX=clang++-14 CC=clang-14 meson setup "$dir" "$@" >/dev/null
    fi
}
common=(-Dfuzz=true -Dtests=false -Dbenchmarks=false -Dexamples=false -Dredis=enabled -Db_lundef=false
        -Dbuildtype=debug -Doptimization=1)
# Quiet when it works; the whole output (ninja prints the compiler's errors on stdout) when not.
build_targets() {
    local log
    log=$(mktemp)
    if ! ninja -C "$1" -j "${SLUICE_FUZZ_BUILD_JOBS:-2}" $(printf 'fuzz/fuzz_%s ' "${targets[@]}") > "$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "fuzz: the build in $1 failed" >&2
        return 1
    fi
    rm -f "$log"
}
configure "$build" "${common[@]}" -Db_sanitize=address,undefined
build_targets "$build"

# ---- run ---------------------------------------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -n $corpus_root ]]; then
    mkdir -p "$corpus_root"
    corpus_root=$(readlink -f "$corpus_root")
    artifacts=$corpus_root/../artifacts
else
    corpus_root=$tmp/corpus
    artifacts=$build/artifacts
fi
mkdir -p "$artifacts"
artifacts=$(readlink -f "$artifacts")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# run_one TARGET: runs it, writes its log to $tmp/TARGET.log and its line to $tmp/TARGET.line.
run_one() {
    local t=$1 log=$tmp/$1.log
    local work=$corpus_root/$t out=$artifacts/$t
    mkdir -p "$work" "$out"
    # Crashes, leaks, timeouts and out-of-memory inputs; libFuzzer's slow-unit-* files (an
    # input slower than 10 s, not a failure) are only reported.
    local before
    before=$(find "$out" -type f ! -name 'slow-unit-*' | wc -l)
    # --seconds 0: no fuzzing, the corpus run once (its coverage, and any input that fails now).
    local limit
    if [[ -n $runs ]]; then
        limit=(-runs="$runs" -seed="$seed")
    elif ((seconds > 0)); then
        limit=(-max_total_time="$seconds")
    else
        limit=(-runs=0)
    fi
    local args=("${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
                -artifact_prefix="$out/" "$work" "fuzz/corpus/$t")
    ((fork > 0)) && args=(-fork="$fork" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 "${args[@]}")
    local rc=0
    "$build/fuzz/fuzz_$t" "${args[@]}" >"$log" 2>&1 || rc=$?
    local crashes execs cov ft corp
    crashes=$(($(find "$out" -type f ! -name 'slow-unit-*' | wc -l) - before))
    grep -q '^Slowest unit' "$log" && echo "fuzz $t: $(grep '^Slowest unit' "$log" | tail -1) (kept in $out)" >&2
    ((rc == 0 || crashes > 0)) || crashes=1   # stopped without an artifact: counted all the same
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [[ -n $execs ]] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    corp=$(grep -oE 'corp: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    printf '%s %s %s %s %s %s\n' "$t" "${execs:-0}" "${cov:-0}" "${ft:-0}" "${corp:-0}" "$crashes" >"$tmp/$t.line"
    if ((crashes > 0)); then
        echo "--- fuzz $t: crashed; its log:" >&2
        grep -E -A12 '==ERROR|runtime error|fuzz invariant|Timeout|out-of-memory' "$log" | head -40 >&2 || tail -30 "$log" >&2
        grep -E '^(Base64|artifact_prefix|Test unit written)' "$log" | tail -3 >&2 || true
    fi
}

echo "fuzz: ${#targets[@]} targets, $([[ -n $runs ]] && echo "$runs runs (seed $seed)" || echo "${seconds}s") each, $jobs at a time$( ((fork)) && echo ", fork $fork"); corpus in $corpus_root"
running=0
for t in "${targets[@]}"; do
    run_one "$t" &
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

total_execs=0 total_crashes=0
for t in "${targets[@]}"; do
    read -r name execs cov ft corp crashes <"$tmp/$t.line"
    result=OK
    ((crashes == 0)) || result=FAIL
    printf 'fuzz %-17s %-4s %12s executions  cov %5s  ft %6s  corpus %5s  crashes %s\n' \
        "$name" "$result" "$execs" "$cov" "$ft" "$corp" "$crashes"
    total_execs=$((total_execs + execs))
    total_crashes=$((total_crashes + crashes))
done
((total_crashes == 0)) || echo "fuzz: the inputs that crashed are in $artifacts"

# ---- line coverage -----------------------------------------------------------------------
if ((coverage)); then
    cov_build=$build-coverage
    configure "$cov_build" "${common[@]}" -Db_sanitize=none \
        "-Dcpp_args=['-fprofile-instr-generate','-fcoverage-mapping']" \
        "-Dcpp_link_args=['-fprofile-instr-generate']"
    build_targets "$cov_build"
    # The library's own sources only (not the targets', not Boost's); its .cpp files are in
    # libsluice.so, which every target loads.
    ignore='(^/usr/|/fuzz/[^/]+$)'
    objects=(-object "$cov_build/libsluice.so")
    for t in "${targets[@]}"; do
        LLVM_PROFILE_FILE="$tmp/$t.profraw" "$cov_build/fuzz/fuzz_$t" -runs=0 \
            "$corpus_root/$t" "fuzz/corpus/$t" >/dev/null 2>&1 || true
        llvm-profdata-14 merge -sparse "$tmp/$t.profraw" -o "$tmp/$t.profdata"
        # Lines of the files the target reached at all (columns: regions, missed, cover,
        # functions, missed, cover, lines, missed, cover, branches, missed, cover).
        llvm-cov-14 report -instr-profile="$tmp/$t.profdata" "$cov_build/fuzz/fuzz_$t" -object "$cov_build/libsluice.so" \
            -ignore-filename-regex="$ignore" 2>/dev/null | awk -v t="$t" '
                NF >= 13 && $1 != "TOTAL" && $1 != "Filename" && $8 > $9 { n += $8; m += $9; f = f " " $1 }
                END { gsub(/[^ ]*(include\/sluice|lib)\//, "", f)
                      printf "coverage %-17s lines %6.2f%% (%d of %d) in%s\n", t, n ? 100 * (n - m) / n : 0, n - m, n, f }'
        objects+=(-object "$cov_build/fuzz/fuzz_$t")
    done
    llvm-profdata-14 merge -sparse "$tmp"/*.profraw -o "$tmp/all.profdata"
    echo "line coverage of the library's sources by all the targets together:"
    llvm-cov-14 report -instr-profile="$tmp/all.profdata" "${objects[@]:1}" -ignore-filename-regex="$ignore" 2>/dev/null |
        awk '/^Filename/ { printf "  %-44s %8s %8s %8s %9s\n", "file", "lines", "missed", "cover", "branches"; next }
             /^-/ { next }
             NF >= 13 { sub(/.*\/(include|lib)\//, "&", $1); printf "  %-44s %8s %8s %8s %9s\n", $1, $8, $9, $10, $13 }'
fi

echo "fuzz: ${#targets[@]} targets, $total_execs executions, $total_crashes crashes"
((total_crashes == 0))
