#!/usr/bin/env bash
# Coverage-guided fuzzing of sluice's untrusted inputs with libFuzzer (clang 14, Debian's
# packages), under AddressSanitizer + UndefinedBehaviorSanitizer. The targets are listed in
# fuzz/targets (one line each: adding a target is a line there plus fuzz/NAME.cpp, whose
# first line names the files it exists for: `// fuzz-covers: FILE...`, from the repository
# root). The kept corpus of a target is fuzz/corpus/NAME: seeds (fuzz/seeds.py) and
# minimised regression inputs; fuzzing reads it and never writes it.
#
#   scripts/fuzz.sh --list                       the targets, one a line
#   scripts/fuzz.sh --seconds N [TARGET...]      build, then fuzz each target N seconds from
#                                                its kept corpus (every target when none is
#                                                named; 0: run the corpus once, no fuzzing)
#   scripts/fuzz.sh --runs N [TARGET...]         each target N inputs from a fixed seed
#                                                (--seed, default 1): the same inputs on
#                                                every machine
#   scripts/fuzz.sh --coverage [TARGET...]       line coverage, by each target's corpus, of
#                                                each file its fuzz-covers line names: one
#                                                line `coverage: TARGET FILE covered/total
#                                                PCT%` each, then a summary; fails when a
#                                                file is under --min-coverage
# --coverage may follow a run (--seconds/--runs); it measures the kept corpus, and the
# campaign's when --corpus is given.
# Options:
#   --jobs J        run J targets at a time (default 1)
#   --fork K        run each target as K libFuzzer worker processes (-fork=K), which go
#                   on after a crash (each crash saved and counted): for long campaigns
#   --corpus DIR    a campaign's corpus: each target's new inputs go to DIR/TARGET (kept;
#                   default: a temporary dir, removed afterwards), and --coverage measures
#                   it with the kept corpus. Crashes go to DIR/../artifacts (default
#                   BUILD/artifacts).
#   --min-coverage PCT   the least line coverage of every fuzz-covers file (default 90)
#   --build DIR     the build directory (default build-fuzz; the coverage build is
#                   DIR-coverage: clang's source-based coverage, no sanitizers)
#   --seed S        libFuzzer's random seed (with --runs; default 1)
# A long campaign, in the background, keeping what it found (fuzz/CAMPAIGN.md):
#   nice scripts/fuzz.sh --seconds 3600 --fork 2 --corpus ~/sluice-fuzz
#
# A run prints one line a target (executions, coverage and features, corpus, crashes), and
# last `fuzz: T targets, E executions, C crashes`; it exits non-zero when C > 0 (or a
# target could not run). Installs what it needs with apt-get (scripts/install-deps.sh, then
# clang-14, its libFuzzer and the llvm tools).
set -euo pipefail

cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

all_targets() { sed -e 's/#.*//' fuzz/targets | awk 'NF { print $1 }'; }
# The files TARGET exists for: its first line, `// fuzz-covers: FILE...`.
covers() { sed -n '1s|^// fuzz-covers:||p' "fuzz/$1.cpp"; }

seconds='' runs='' seed=1 jobs=1 fork=0 corpus_root='' coverage=0 min_coverage=90 build=build-fuzz targets=()
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
    --min-coverage) min_coverage=$2; shift ;;
    --build) build=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1") ;;
    esac
    shift
done
fuzzing=1
if [[ -n $runs ]]; then
    [[ $runs =~ ^[0-9]+$ && $seed =~ ^[0-9]+$ && -z $seconds ]] ||
        { echo "fuzz: --runs N (and --seed S) are numbers, without --seconds" >&2; exit 2; }
elif [[ -n $seconds ]]; then
    [[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz: --seconds N takes a whole number" >&2; exit 2; }
elif ((coverage)); then
    fuzzing=0
else
    echo "fuzz: --seconds N, --runs N or --coverage is required (or --list)" >&2
    exit 2
fi
[[ $min_coverage =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "fuzz: --min-coverage PCT is a number" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: --jobs J is a number >= 1" >&2; exit 2; }
known=$(all_targets)
((${#targets[@]})) || mapfile -t targets <<<"$known"
for t in "${targets[@]}"; do
    grep -qx -- "$t" <<<"$known" || { echo "fuzz: no target $t (see --list)" >&2; exit 2; }
done
if ((coverage)); then
    for t in "${targets[@]}"; do
        files=$(covers "$t")
        [[ -n ${files// /} ]] ||
            { echo "fuzz: fuzz/$t.cpp does not start with a line \`// fuzz-covers: FILE...'" >&2; exit 2; }
        for f in $files; do
            [[ -f $f ]] || { echo "fuzz: fuzz/$t.cpp covers $f, which does not exist" >&2; exit 2; }
        done
    done
fi

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

configure() {
    local dir=$1
    shift
    if [[ -f $dir/meson-private/coredata.dat ]]; then
        # (Meson 1.0's setup --reconfigure does not always apply -D options: set them first.)
        meson configure "$dir" "$@" >/dev/null
        meson setup --reconfigure "$dir" >/dev/null
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

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
campaign=$corpus_root
if [[ -n $corpus_root ]]; then
    mkdir -p "$corpus_root"
    corpus_root=$(readlink -f "$corpus_root")
    artifacts=$corpus_root/../artifacts
else
    corpus_root=$tmp/corpus
    artifacts=$build/artifacts
fi

# ---- fuzz --------------------------------------------------------------------------------
# The library and the targets with libFuzzer's instrumentation, ASan and UBSan (clang does
# not link the sanitizer runtimes into shared libraries: b_lundef off). -O1 -g: what the
# sanitizers need for readable reports, at a speed that still counts.
# run_one TARGET: runs it, writes its log to $tmp/TARGET.log and its line to $tmp/TARGET.line.
run_one() {
    local t=$1 log=$tmp/$1.log
    local work=$corpus_root/$t out=$artifacts/$t
    mkdir -p "$work" "$out"
    # Crashes, leaks, timeouts and out-of-memory inputs; libFuzzer's slow-unit-* files (an
    # input slower than 10 s, not a failure) are only reported.
    local before
    before=$(find "$out" -type f ! -name 'slow-unit-*' | wc -l)
    # --seconds 0: no fuzzing, the corpus run once (any input that fails now).
    local limit
    if [[ -n $runs ]]; then
        limit=(-runs="$runs" -seed="$seed")
    elif ((seconds > 0)); then
        limit=(-max_total_time="$seconds")
    else
        limit=(-runs=0)
    fi
    # New inputs go to the first directory, the campaign's (or a temporary) one; the kept
    # corpus is only read.
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

# run_all FUNCTION: FUNCTION TARGET for every target, $jobs at a time.
run_all() {
    local running=0 t
    for t in "${targets[@]}"; do
        "$1" "$t" &
        running=$((running + 1))
        if ((running >= jobs)); then
            wait -n || true
            running=$((running - 1))
        fi
    done
    wait || true
}

total_crashes=0
if ((fuzzing)); then
    configure "$build" "${common[@]}" -Db_sanitize=address,undefined
    build_targets "$build"
    mkdir -p "$artifacts"
    artifacts=$(readlink -f "$artifacts")
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

    echo "fuzz: ${#targets[@]} targets, $([[ -n $runs ]] && echo "$runs runs (seed $seed)" || echo "${seconds}s") each, $jobs at a time$( ((fork)) && echo ", fork $fork"); new inputs in $corpus_root"
    run_all run_one
    total_execs=0
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
    echo "fuzz: ${#targets[@]} targets, $total_execs executions, $total_crashes crashes"
fi

# ---- line coverage -----------------------------------------------------------------------
# Each target's corpus (kept, and the campaign's) run once by a build with clang's
# source-based coverage; the lines of its fuzz-covers files that ran, from llvm-cov's export
# of that target's profile alone (a file's lines reached by another target do not count).
# A line counts when any of its instantiations ran. An inline function the target never
# calls counts as missed lines; a template it never instantiates (a member of a class
# template it never uses) is not in the count at all.
cov_failed=0
if ((coverage)); then
    cov_build=$build-coverage
    # (Meson's compiler checks run instrumented programs: their profiles go nowhere.)
    # NDEBUG: clang 14 counts the line after an assert() as never run (the assert's
    # noreturn branch ends its region); the ASan build keeps the assertions.
    LLVM_PROFILE_FILE=/dev/null configure "$cov_build" "${common[@]}" -Db_sanitize=none \
        "-Dcpp_args=['-fprofile-instr-generate','-fcoverage-mapping','-DNDEBUG']" \
        "-Dcpp_link_args=['-fprofile-instr-generate']"
    LLVM_PROFILE_FILE=/dev/null build_targets "$cov_build"
    cov_build=$(readlink -f "$cov_build")
    # cov_one TARGET: its profile, exported as $tmp/TARGET.json (or $tmp/TARGET.failed).
    cov_one() {
        local t=$1 dirs=("fuzz/corpus/$t")
        # A run's temporary corpus is not measured: the kept corpus must cover by itself.
        [[ -n $campaign && -d $corpus_root/$t ]] && dirs=("$corpus_root/$t" "${dirs[@]}")
        mkdir -p "$tmp/prof-$t"
        # -runs=0: every input once, no fuzzing, nothing written.
        if ! LLVM_PROFILE_FILE="$tmp/prof-$t/%p.profraw" "$cov_build/fuzz/fuzz_$t" -runs=0 -timeout=30 \
                "${dirs[@]}" >"$tmp/$t.cov.log" 2>&1; then
            echo "fuzz: coverage of $t: an input of its corpus fails (see it with scripts/fuzz.sh --seconds 0 $t):" >&2
            tail -15 "$tmp/$t.cov.log" >&2
            touch "$tmp/$t.failed"
        fi
        llvm-profdata-14 merge -sparse "$tmp/prof-$t"/*.profraw -o "$tmp/$t.profdata" ||
            { echo "fuzz: no profile of $t" >&2; touch "$tmp/$t.failed"; return; }
        # The target and the libraries of this build it loads (the library's own .cpp files
        # are in libsluice.so; a target may load others).
        local objects=() so
        for so in $(ldd "$cov_build/fuzz/fuzz_$t" | awk -v b="$cov_build/" 'index($3, b) == 1 { print $3 }'); do
            objects+=(-object "$so")
        done
        if ! llvm-cov-14 export -summary-only -instr-profile="$tmp/$t.profdata" "$cov_build/fuzz/fuzz_$t" \
                "${objects[@]}" >"$tmp/$t.json" 2>"$tmp/$t.cov.err"; then
            cat "$tmp/$t.cov.err" >&2
            echo "fuzz: llvm-cov-14 export failed for $t" >&2
            touch "$tmp/$t.failed"
        fi
    }
    run_all cov_one
    for t in "${targets[@]}"; do
        [[ -f $tmp/$t.failed ]] && cov_failed=1
        echo "$t $(covers "$t")"
    done >"$tmp/covers"
    python3 - "$tmp" "$cov_build" "$min_coverage" "$cov_failed" <<'EOF' || cov_failed=1
import json, os, sys
tmp, build, least, failed = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
root = os.getcwd()
files = under = 0
for line in open(os.path.join(tmp, "covers")):
    target, *wanted = line.split()
    lines = {}
    try:
        exported = json.load(open(os.path.join(tmp, target + ".json")))["data"]
    except (OSError, ValueError):   # no profile or no export: reported above
        exported = []
    for data in exported:
        for f in data["files"]:
            name = f["filename"] if os.path.isabs(f["filename"]) else os.path.join(build, f["filename"])
            lines[os.path.relpath(os.path.realpath(name), root)] = f["summary"]["lines"]
    for w in wanted:
        files += 1
        s = lines.get(os.path.normpath(w))
        if not s or not s["count"]:
            print("coverage: %s %s 0/0 -   (no line of it in the target: a wrong name?)" % (target, w))
            under += 1
            continue
        pct = 100.0 * s["covered"] / s["count"]
        print("coverage: %s %s %d/%d %.1f%%" % (target, w, s["covered"], s["count"], pct))
        under += s["covered"] * 100 < least * s["count"]
print("coverage: %d targets, %d files, %d under %g%%%s" % (
    len(open(os.path.join(tmp, "covers")).readlines()), files, under, least,
    ", an input that fails" if failed else ""))
sys.exit(1 if under or failed else 0)
EOF
fi

((total_crashes == 0 && cov_failed == 0))
