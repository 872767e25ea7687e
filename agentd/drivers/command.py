"""The command driver: a Task that is one command (argv), run in the sandbox with a minimal environment
(agentd/run/command.py) after the project's setup (agentd/run/preparation.py), in its workdir, with its
files written into the workspace first."""

from __future__ import annotations

import asyncio

from agentd.errors import RunEnded
from agentd.run import cgroup_lock, preparation
from agentd.run.command import Command, Invocation
from agentd.run.spec import RunSpec
from agentd.run.supervisor import Run


def driver(spec: RunSpec) -> CommandDriver:
    return CommandDriver()


class CommandDriver:
    crash_code = "supervisor_error"
    output_slack = 64 * 1024

    async def drive(self, run: Run) -> RunEnded:
        cgroup_lock.warm(run.spec.cgroups)  # the kernel's wait for the command's cgroup join, beside the clone
        run.clone()
        if run.spec.preparation.setup:  # without a setup there is nothing to wait for
            await asyncio.to_thread(preparation.setup_workspace, run, run.repo_dir)
        else:
            preparation.setup_workspace(run, run.repo_dir)
        cwd = preparation.place_files(run, run.repo_dir)
        sandbox = run.sandbox(run.spec.network, hand_over=(run.repo_dir, run.home))
        run.check_cancel()
        spec = run.spec
        env, binds = run.command_env(run.repo_dir, run.home)
        env["DROVER_TASK_KEY"] = spec.task_key
        env.update(spec.env)
        env.update(run.command_secrets)
        what = Invocation(list(spec.argv), cwd, env, [run.repo_dir, run.home], binds, float(spec.timeout_seconds or 0))
        command = Command(run.output, lambda: run.cancelled, spec.kill_grace_seconds, what)
        return await asyncio.to_thread(command.follow, sandbox)
