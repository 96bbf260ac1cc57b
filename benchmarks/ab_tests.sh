#!/usr/bin/env bash
# The same pytest selection from two checkouts of the project, alternately, on one machine: the
# machine's CPU busy seconds (/proc/stat, every process: the tests' drivers, daemons and servers
# too) and pytest's own line for each run. Alternating rounds put the machine's changes of pace
# on both sides alike.
#
#   git worktree add /tmp/before <commit>
#   benchmarks/ab_tests.sh /tmp/before . 2 tests/faults/test_interrupt.py
#
# Each checkout runs with its own tree first on PYTHONPATH (this venv's packages otherwise);
# run it on a quiet machine.
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 BEFORE_TREE AFTER_TREE ROUNDS PYTEST_ARGS..." >&2
  exit 2
fi
before=$(cd "$1" && pwd); after=$(cd "$2" && pwd); rounds=$3; shift 3
# both trees compiled first: where PYTHONDONTWRITEBYTECODE is set, a tree without bytecode
# compiles its modules again in every process it starts (what `make bytecode` does for one)
for tree in "$before" "$after"; do
  (cd "$tree" && python -m compileall -q dihal pipeline assets resources storage tests \
     benchmarks scripts)
done
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
for round in $(seq "$rounds"); do
  for side in after before; do
    tree=$after; [ "$side" = before ] && tree=$before
    start=$(busy)
    line=$(cd "$tree" && PYTHONPATH="$tree" python -m pytest -q -p no:cacheprovider "$@" 2>&1 \
             | tail -1)
    end=$(busy)
    echo "$side round $round: CPU busy $(( (end - start) / 100 )) s; $line"
  done
done
