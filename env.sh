# Source this file (`. ./env.sh`) to use the dagster CLI on this project by hand:
#   dagster asset materialize --select '*layer_score_smollm2'
#   make ui                # web UI on http://127.0.0.1:3000 (dagster dev and its daemon,
#                          # python -m pipeline.ui: Ctrl-C leaves no process behind)
_dihal_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
[ -f "$_dihal_root/.venv/bin/activate" ] && . "$_dihal_root/.venv/bin/activate"
# a DAGSTER_HOME of your own is kept; else .dagster/ in the project
export DAGSTER_HOME="${DAGSTER_HOME:-$_dihal_root/.dagster}"
export DAGSTER_MODULE_NAME="pipeline.definitions"
export DIHAL_ARTIFACTS="${DIHAL_ARTIFACTS:-$_dihal_root/.dihal/artifacts}"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
# Steps at once on this machine (the run queue's limit; CPU steps divide the cores). The driver's
# --workers overrides it for its own run.
export DIHAL_WORKERS="${DIHAL_WORKERS:-1}"
export TRANSFORMERS_NO_ADVISORY_WARNINGS=1
# how long a code server may take to start a run (Dagster's own 60 s is too short on a loaded
# 2-core host; pipeline/daemon.py gives the daemons it starts the same)
export DAGSTER_GRPC_TIMEOUT_SECONDS="${DAGSTER_GRPC_TIMEOUT_SECONDS:-300}"
mkdir -p "$DAGSTER_HOME"
# dagster.yaml (SQLite under DAGSTER_HOME), or DIHAL_DAGSTER_YAML=dagster.postgres.yaml (many
# hosts), copied where the instance has none; an instance's own dagster.yaml (your edits, e.g.
# code_servers.local_startup_timeout) is kept: delete it to take the project's again
_dihal_yaml="$_dihal_root/${DIHAL_DAGSTER_YAML:-dagster.yaml}"
if [ ! -f "$DAGSTER_HOME/dagster.yaml" ]; then
  cp "$_dihal_yaml" "$DAGSTER_HOME/dagster.yaml"
elif ! cmp -s "$_dihal_yaml" "$DAGSTER_HOME/dagster.yaml"; then
  echo "env.sh: keeping $DAGSTER_HOME/dagster.yaml (it differs from $_dihal_yaml)" >&2
fi
unset _dihal_root _dihal_yaml
