#!/usr/bin/env bash
# Mutation check of the unit tests: plants each bug of scripts/ci/mutants.txt, one at a time, in a
# scratch clone of the committed tree (CPU build, incremental rebuilds through ccache), runs the
# unit-test binaries of the module it touches, and reports per mutant whether they caught it.
# Not part of CI: run it on demand and before a change to the tests lands (docs/testing.md).
# usage: scripts/ci/mutants.sh [ID_REGEX]   (default: every mutant; exit 1 unless all were caught)
# env: MUTANTS_DIR (scratch clone, default /tmp/matserve-mutants), JOBS (build jobs, default 2)
set -euo pipefail
repo=$(git -C "$(dirname "$0")/../.." rev-parse --show-toplevel)
list=$repo/scripts/ci/mutants.txt
only=${1:-.*}
scratch=${MUTANTS_DIR:-/tmp/matserve-mutants}
build=$scratch/build-mutants
jobs=${JOBS:-2}
# Paths under the scratch clone hash as relative ones: its objects are cached like a worktree's.
export CCACHE_BASEDIR=$scratch
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_C_COMPILER_LAUNCHER=ccache) || launcher=()

# The scratch clone at the commit checked out here (uncommitted changes are not planted on).
[ -d "$scratch/.git" ] || git clone -q --no-hardlinks "$repo" "$scratch"
git -C "$scratch" fetch -q "$repo" HEAD
git -C "$scratch" checkout -q --detach FETCH_HEAD
git -C "$scratch" reset -q --hard
git -C "$scratch" clean -fdq -e build-mutants
cmake -S "$scratch" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMATSERVE_CUDA=OFF \
  "${launcher[@]}" >"$scratch/configure.log"

binary() { find "$build/tests" -name "$1" -type f -executable | head -n 1; }

# plant FILE OCCURRENCE FIND REPLACE: literal replacement (\n = newline); fails if FIND is absent.
plant() {
  /usr/bin/python3 - "$scratch/$1" "$2" "$3" "$4" <<'EOF'
import sys
path, occurrence, find, replace = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
find, replace = find.replace("\\n", "\n"), replace.replace("\\n", "\n")
text = open(path).read()
at = -1
for _ in range(occurrence):
    at = text.find(find, at + 1)
    if at < 0:
        sys.exit(f"{path}: occurrence {occurrence} of the text to replace not found")
open(path, "w").write(text[:at] + replace + text[at + len(find):])
EOF
}

# run_tests TARGETS(comma-separated): builds and runs them; 0 when every one passes.
run_tests() {
  local targets=${1//,/ } t
  # shellcheck disable=SC2086
  cmake --build "$build" -j "$jobs" --target $targets >"$scratch/build.log" 2>&1 || return 2
  for t in $targets; do
    "$(binary "$t")" --gtest_brief=1 >"$scratch/test-$t.log" 2>&1 || return 1
  done
  return 0
}

mapfile -t mutants < <(grep -E '^[A-Z][0-9]+ \| ' "$list" | awk -F' [|] ' -v re="^($only)\$" '$1 ~ re')
all_targets=$(printf '%s\n' "${mutants[@]}" | awk -F' [|] ' '{print $6}' | tr ',' '\n' | sort -u |
              paste -sd, -)
start=$(date +%s)
echo "== baseline: $all_targets"
if ! run_tests "$all_targets"; then
  echo "the unmutated tree fails its tests (see $scratch/*.log): no mutant planted" >&2
  exit 2
fi
caught=0
survived=0
invalid=0
results=()
for line in "${mutants[@]}"; do
  IFS=$'\x1f' read -r id file occurrence find replace targets what \
    <<<"$(sed 's/ | /\x1f/g' <<<"$line")"
  t0=$(date +%s)
  if ! plant "$file" "$occurrence" "$find" "$replace"; then
    results+=("$(printf '%-4s %-9s %-48s %s' "$id" "NOT-FOUND" "$file" "$what")")
    invalid=$((invalid + 1))
    continue
  fi
  if run_tests "$targets"; then
    verdict=SURVIVED
    survived=$((survived + 1))
  elif [ $? -eq 2 ]; then
    verdict=NO-BUILD  # a mutant that does not compile tells nothing: fix its line
    invalid=$((invalid + 1))
  else
    verdict=caught
    caught=$((caught + 1))
  fi
  git -C "$scratch" checkout -q -- "$file"
  results+=("$(printf '%-4s %-9s %-48s %-40s %4ds' "$id" "$verdict" "$file" "$what" \
               "$(($(date +%s) - t0))")")
  echo "${results[-1]}"
done
# Leave the build matching the clean tree for the next run's incremental build.
cmake --build "$build" -j "$jobs" --target ${all_targets//,/ } >/dev/null 2>&1 || true
echo "== mutants: ${#mutants[@]}, caught $caught, survived $survived, not planted or not built" \
  "$invalid, $(($(date +%s) - start)) s"
printf '%s\n' "${results[@]}"
[ $survived -eq 0 ] && [ $invalid -eq 0 ]
