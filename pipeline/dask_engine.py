"""Steps on a Dask cluster: the executor of every job when DIHAL_DASK_SCHEDULER names a
scheduler (local processes, Slurm/PBS/SGE through dask-jobqueue, Kubernetes through
dask-kubernetes; README, "Scaling out").

Built on dagster-dask's step function (each Dask task runs one Dagster step against the
instance), with one change that concurrent runs need: dagster-dask names a task
"<job>.<step>", the same in every run of a job, and Dask treats tasks of the same name as one,
so the sweep's partitions, launched at once, would share the first partition's task. Here a
task is named after its run too; and the run goes to the worker serialised (a run in a pool
carries a record that Dask's walk over a task's arguments cannot iterate). A step asks for one
unit of the workers' "device" resource
(assets._stage.DEVICE_STEP_TAGS), so a worker started with `--resources device=1` runs one
step at a time and two steps never share its GPU.
"""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.executor_definition import multiple_process_executor_requirements
from dagster._core.errors import raise_execution_interrupts
from dagster._core.execution.retries import RetryMode
from dagster._utils import iterate_with_context


class DaskStepExecutor(dg.Executor):
    def __init__(self, address: str):
        self.address = address

    @property
    def retries(self) -> RetryMode:
        return RetryMode.DISABLED

    def execute(self, plan_context, execution_plan):
        import dask.distributed
        from dagster_dask.executor import get_dask_resource_requirements

        run = plan_context.dagster_run
        if not plan_context.instance.is_persistent:
            raise dg.DagsterInvariantViolationError(
                "steps on a Dask cluster need a persistent Dagster instance (set DAGSTER_HOME)")
        from dagster._serdes import serialize_value

        # the run goes serialised: a run in a pool carries a record (its op concurrency) that
        # the Dask client's walk over a task's arguments cannot iterate
        run_json = serialize_value(run)
        with dask.distributed.Client(self.address) as client:
            futures = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    upstream = [futures[key] for step_input in step.step_inputs
                                for key in step_input.dependency_keys]
                    futures[step.key] = client.submit(
                        step_on_worker, upstream, plan_context.reconstructable_job, run_json,
                        plan_context.run_config, [step.key], plan_context.instance.get_ref(),
                        execution_plan.known_state,
                        key=f"{run.job_name}.{step.key}.{run.run_id}",  # unique per run
                        resources=get_dask_resource_requirements(step.tags))
            done = dask.distributed.as_completed(list(futures.values()), with_results=True)
            for _future, events in iterate_with_context(raise_execution_interrupts, done):
                yield from events


def step_on_worker(dependencies, recon_job, run_json: str, run_config, step_keys, instance_ref,
                   known_state):
    """dagster-dask's step function on a Dask worker, given the run serialised."""
    from dagster._serdes import deserialize_value
    from dagster_dask.executor import query_on_dask_worker

    return query_on_dask_worker(dependencies, recon_job, deserialize_value(run_json, dg.DagsterRun),
                                run_config, step_keys, instance_ref, known_state)


@dg.executor(name="dask", requirements=multiple_process_executor_requirements(),
             config_schema={"address": dg.Field(dg.StringSource,
                                                description="the Dask scheduler's address")})
def dask_executor(init_context) -> DaskStepExecutor:
    """Every step as a Dask task on the cluster whose scheduler is at `address`."""
    return DaskStepExecutor(init_context.executor_config["address"])
