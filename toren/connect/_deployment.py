"""Worker Deployments: which Worker Deployment Version a toren worker registers as.

A worker started with a deployment name and a build id (`toren worker --deployment support
--build-id v2`, or `TOREN_DEPLOYMENT` / `TOREN_BUILD_ID`) polls as that version of the
deployment, and Temporal routes each workflow to the version it belongs to:

- `AgentRun` is pinned (the worker's default behavior, `pinned_by_default`): a run finishes on
  the version it started on, with that version's tool code, instructions and model, however
  long it parks on an approval;
- `AgentThread` is pinned too, and moves only at rest: between two messages, when the
  deployment's current version is no longer its own, it continues as new onto the current
  version (`toren.workflows._agent_thread`); an execution in progress finishes where it began.

A version takes new runs once it is current: `temporal worker deployment set-current-version
--deployment-name support --build-id v2` (or ramping). Without a deployment name the worker is
unversioned, as before: every worker of a task queue takes every task.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping

from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import WorkerDeploymentConfig

from toren.errors import ConfigError

__all__ = ["BUILD_ID_ENV", "DEPLOYMENT_ENV", "pinned_by_default", "worker_deployment"]

DEPLOYMENT_ENV = "TOREN_DEPLOYMENT"
BUILD_ID_ENV = "TOREN_BUILD_ID"

_NAME = re.compile(r"[A-Za-z0-9_\-]{1,200}")
"""A deployment name: Temporal writes a version as `<name>.<build id>`, so no dot in the name."""
_BUILD_ID = re.compile(r"[A-Za-z0-9_.\-+]{1,200}")


def worker_deployment(
    deployment: str | None = None,
    build_id: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> WorkerDeploymentConfig | None:
    """The deployment config of a worker, or `None` for an unversioned one.

    Arguments win over `TOREN_DEPLOYMENT` / `TOREN_BUILD_ID` in `environ` (default
    `os.environ`). Both or neither must be given.

    Raises:
        ConfigError: one of the two without the other, or a name or build id Temporal refuses.
    """
    env = os.environ if environ is None else environ
    name = (deployment if deployment is not None else env.get(DEPLOYMENT_ENV, "")).strip()
    build = (build_id if build_id is not None else env.get(BUILD_ID_ENV, "")).strip()
    if not name and not build:
        return None
    problems = []
    if not name:
        problems.append(
            f"a build id ({build!r}) without a deployment name: give --deployment NAME "
            f"(or {DEPLOYMENT_ENV}) too, or neither for an unversioned worker"
        )
    elif not _NAME.fullmatch(name):
        problems.append(
            f"deployment name {name!r}: use letters, digits, '-' and '_' (no '.', which "
            "separates the name from the build id in a version)"
        )
    if not build:
        problems.append(
            f"deployment {name!r} without a build id: give --build-id ID (or {BUILD_ID_ENV}), "
            "e.g. the commit or release of this worker's code"
        )
    elif not _BUILD_ID.fullmatch(build):
        problems.append(
            f"build id {build!r}: use letters, digits and '-', '_', '.', '+' (a commit, a tag)"
        )
    if problems:
        raise ConfigError(problems)
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def pinned_by_default(config: WorkerDeploymentConfig) -> WorkerDeploymentConfig:
    """`config`, pinning the workflows that declare no behavior of their own.

    toren's workflows cannot declare `versioning_behavior=PINNED` themselves: Temporal refuses
    a declared behavior from an unversioned worker, and the same classes serve both. So a
    versioned worker's default pins them. A default left unspecified would have made the SDK
    refuse every workflow without a declared behavior, so this changes no workflow that ran.
    """
    if not config.use_worker_versioning:
        return config
    if config.default_versioning_behavior != VersioningBehavior.UNSPECIFIED:
        return config
    return dataclasses.replace(config, default_versioning_behavior=VersioningBehavior.PINNED)
