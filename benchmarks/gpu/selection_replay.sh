#!/usr/bin/env bash
# Backs docs/selection.md § Replay, its rows run on the GPU machine: the rest of
# benchmarks/selection_replay.py's window on that machine's 16 CPUs (no GPU is used):
# JOBS commits side by side (--jobs), each in its own worktree of a clone of this repository, in a venv of
# the harness's own test stack (the versions of .nox/cpu_stack, as wheels). The rows and runs come back as
# $OUT/replay.tgz; here: tar xzf it into a folder, then selection_replay.py --work W --ingest FOLDER.
#
# Staged here first (X, git-ignored, carried):
#   X/whl/*.whl     pip download --only-binary=:all: --python-version 3.12 ... pytest pytest-xdist
#                   pytest-timeout pytest-rerunfailures hypothesis psutil rich markdown-it-py PyYAML jsonschema
#                   check-jsonschema (pinned as in .nox/cpu_stack), and `pip wheel --no-deps` of HEAD
#   X/repo.bundle   git bundle create X/repo.bundle main
#   X/work          the work folder so far: rows.jsonl (those commits are skipped) and, in runs/, the report
#                   of the last one run on this Python (the first new commit's history; else it is run first)
#   X/slice.txt     the suite's test paths
# Run there: X=.xfer/replay JOBS=10 LIMIT=470 HEAD_REV=f2566ae bash benchmarks/gpu/selection_replay.sh
set -u
X=${X:-.xfer/replay}
OUT=${OUT:-/tmp/out}
python3 --version
git --version || exit 2
nproc
python3 -m venv --without-pip /tmp/v || exit 2
python3 -m pip --python /tmp/v/bin/python install -q --no-index --no-deps --no-compile "$X"/whl/*.whl \
    || python3 -m pip install -q --no-index --no-deps --no-compile \
        --target "$(/tmp/v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
        "$X"/whl/*.whl \
    || exit 2
[ -d /tmp/repo ] || git clone -q "$X/repo.bundle" /tmp/repo || exit 2
[ -d /tmp/w ] || cp -r "$X/work" /tmp/w
started=$(date +%s)
timeout "${LIMIT:-470}" /tmp/v/bin/python benchmarks/selection_replay.py --repo /tmp/repo --work /tmp/w \
    --commits 40 --head "${HEAD_REV:-f2566ae}" --jobs "${JOBS:-10}" --python /tmp/v/bin/python \
    --suite-args "$(cat "$X/slice.txt")" 2>&1 | grep -v '^    '
echo "replay: $(($(date +%s) - started)) s, $(wc -l </tmp/w/rows.jsonl) rows"
tar czf "$OUT/replay.tgz" -C /tmp/w rows.jsonl runs
