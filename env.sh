# Source this file (`. ./env.sh`) to use the dagster CLI on this project by hand:
#   dagster asset materialize --select '*layer_score_smollm2'
#   make ui                # web UI on http://127.0.0.1:3000 (dagster dev, plus the schedule
#                          # daemon; run it without DAGSTER_MODULE_NAME, which makes it hang)
_dihal_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
[ -f "$_dihal_root/.venv/bin/activate" ] && . "$_dihal_root/.venv/bin/activate"
export DAGSTER_HOME="$_dihal_root/.dagster"
export DAGSTER_MODULE_NAME="pipeline.definitions"
export DIHAL_ARTIFACTS="${DIHAL_ARTIFACTS:-$_dihal_root/.dihal/artifacts}"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
# Steps at once on this machine (the run queue's limit; CPU steps divide the cores). The driver's
# --workers overrides it for its own run.
export DIHAL_WORKERS="${DIHAL_WORKERS:-1}"
export TRANSFORMERS_NO_ADVISORY_WARNINGS=1
mkdir -p "$DAGSTER_HOME"
# dagster.yaml (SQLite under DAGSTER_HOME), or DIHAL_DAGSTER_YAML=dagster.postgres.yaml (many hosts)
cp "$_dihal_root/${DIHAL_DAGSTER_YAML:-dagster.yaml}" "$DAGSTER_HOME/dagster.yaml"
unset _dihal_root
