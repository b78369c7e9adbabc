r"""`ctx.run_code`: Python source run in bash's jail, its entry function's value passed back.

```python
jail = Jail(bwrap=shutil.which("bwrap"), network=False)
run = await run_code(jail, workspace, "def main(x):\n    return x + 1\n", args=[41])
run.result   # 42
```

The source and `modules` are written to a private directory on the worker, mounted read-only
in the sandbox at `/code` (first on `sys.path`), so the code can neither rewrite them nor plant
a symlink the worker would follow. The entry's value comes back as JSON through a file the
worker opened and passed in as a file descriptor: nothing the code prints can be mistaken for
it, and the worker never opens a path the code could have chosen.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toren.agent._code_run import CodeRun
from toren.agent._payload_limits import MAX_RESULT_BYTES
from toren.errors import UsageError
from toren.worker.tools._sandbox._jail import SANDBOX_PATH, TIMEOUT_EXIT_CODE, Jail

__all__ = ["DEFAULT_ENTRY", "MAX_CODE_TIMEOUT_S", "check_modules", "run_code"]

DEFAULT_ENTRY = "main"
"""The function `run_code` calls when no `entry` is given."""
MAX_CODE_TIMEOUT_S = 600
"""The longest `timeout_s` a `run_code` call may ask for (bash's own maximum)."""
CODE_DIR = "/code"
"""Where the source and modules are, read-only, inside the sandbox."""

_MODULE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*/)*[A-Za-z_][A-Za-z0-9_]*\.py")
_SOURCE = "_toren_source.py"
_RUNNER = "_toren_runner.py"
_ARGS = "_toren_args.json"

# Runs inside the sandbox with the system's python3: argv is the code dir, the result fd and
# the entry. It writes one JSON object to the fd: {"result": value} or {"error": one line}.
_RUNNER_SOURCE = r"""
import asyncio, importlib.util, inspect, json, os, sys, traceback

code_dir, fd, entry = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.set_inheritable(fd, False)  # not for the code's own subprocesses
out = os.fdopen(fd, "w", encoding="utf-8")
sys.argv = [os.path.join(code_dir, "_toren_source.py")]
sys.path.insert(0, code_dir)


class NoEntry(Exception):
    pass


def call():
    with open(os.path.join(code_dir, "_toren_args.json"), encoding="utf-8") as f:
        args = json.load(f)
    spec = importlib.util.spec_from_file_location("__code__", sys.argv[0])
    module = importlib.util.module_from_spec(spec)
    sys.modules["__code__"] = module
    spec.loader.exec_module(module)
    function = getattr(module, entry, None)
    if not callable(function):
        raise NoEntry(f"the code defines no function {entry!r} (the entry to call)")
    value = function(*args)
    if inspect.isawaitable(value):
        async def wait():
            return await value
        value = asyncio.run(wait())
    return value


try:
    value = call()
except NoEntry as err:
    answer = {"error": str(err)}
except BaseException as err:
    traceback.print_exc()
    answer = {"error": traceback.format_exception_only(type(err), err)[-1].strip()}
else:
    answer = {"result": value}
try:
    text = json.dumps(answer, allow_nan=False)
except (TypeError, ValueError) as err:
    text = json.dumps(
        {"error": f"{entry}() returned a {type(value).__name__}, which is not JSON: {err}"}
    )
out.write(text)
out.close()
sys.exit(0 if text.startswith('{"result"') else 1)
"""


def check_modules(modules: Mapping[str, str]) -> None:
    """Refuse a `modules` key that is not a relative `.py` path of identifiers.

    Raises:
        UsageError: Naming the first bad key and what a good one looks like.
    """
    for key, text in modules.items():
        if not isinstance(key, str) or not _MODULE.fullmatch(key):
            raise UsageError(
                f"modules key {key!r} is not a module file name: use a relative path of Python "
                "identifiers ending in .py, e.g. 'helpers.py' or 'pkg/util.py' (no '..', no "
                "leading '/')"
            )
        if key.split("/")[0].startswith("_toren_"):
            raise UsageError(f"modules key {key!r}: names starting with '_toren_' are toren's own")
        if not isinstance(text, str):
            raise UsageError(f"modules[{key!r}] must be source text, got {type(text).__name__}")


async def run_code(
    jail: Jail,
    workspace: Path,
    source: str,
    *,
    modules: Mapping[str, str] | None = None,
    entry: str = DEFAULT_ENTRY,
    args: Sequence[Any] = (),
    timeout_s: float = 30,
) -> CodeRun:
    """Run `source` in `jail` with `workspace` as its working directory; call `entry(*args)`.

    Raises:
        UsageError: A bad module name, entry, args (not JSON) or timeout; the code's own
            failures come back as a `CodeRun` with `error` set instead.
    """
    modules = dict(modules or {})
    check_modules(modules)
    if not isinstance(entry, str) or not entry.isidentifier():
        raise UsageError(f"entry {entry!r} is not a function name")
    if not 0 < timeout_s <= MAX_CODE_TIMEOUT_S:
        raise UsageError(f"timeout_s must be above 0 and at most {MAX_CODE_TIMEOUT_S}")
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise UsageError(f"args must be a list of JSON values, got {type(args).__name__}")
    try:
        args_json = json.dumps(list(args), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise UsageError(f"args must be JSON values: {err}") from None
    with (
        tempfile.TemporaryDirectory(prefix="toren-code-") as tmp,
        tempfile.TemporaryFile(prefix="toren-code-result-") as channel,
    ):
        code = Path(tmp)
        for name, text in {**modules, _SOURCE: source, _RUNNER: _RUNNER_SOURCE}.items():
            (code / name).parent.mkdir(parents=True, exist_ok=True)
            (code / name).write_text(text, encoding="utf-8")
        (code / _ARGS).write_text(args_json, encoding="utf-8")
        seen = CODE_DIR if jail.bwrap else str(code)
        fd = channel.fileno()
        # -I: no PYTHON* variables, no user site-packages, not the script's dir on sys.path.
        # -B: no .pyc files written (the code dir is read-only anyway).
        command = shlex.join(["python3", "-I", "-B", f"{seen}/{_RUNNER}", seen, str(fd), entry])
        env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}
        done = await jail.run(
            f"exec {command}",
            workspace,
            env,
            timeout_s,
            binds=[(code, CODE_DIR)],
            pass_fds=[fd],
            timeout_note=f"killed after timeout_s={timeout_s:g} (at most {MAX_CODE_TIMEOUT_S})",
        )
        channel.seek(0)
        data = channel.read(MAX_RESULT_BYTES + 1)
    return _outcome(done, data, entry, timeout_s)


def _outcome(done: Mapping[str, Any], data: bytes, entry: str, timeout_s: float) -> CodeRun:
    """The `CodeRun` of a finished process and what it wrote to the result channel."""
    exit_code = done["exit_code"]

    def run(result: Any = None, error: str | None = None) -> CodeRun:
        return CodeRun(result, done["stdout"], done["stderr"], exit_code, error)

    if len(data) > MAX_RESULT_BYTES:
        return run(
            error=f"{entry}() returned over {MAX_RESULT_BYTES:,} bytes of JSON; write large "
            "output to a file in the workspace and return its path"
        )
    try:
        answer = json.loads(data) if data else {}
    except ValueError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    if "result" in answer:
        # Even when the process then hung or failed on exit (a stray thread): the entry returned.
        return run(result=answer["result"])
    if done.get("error"):
        return run(error=str(done["error"]))  # a sandbox limit, named
    if exit_code == TIMEOUT_EXIT_CODE:
        return run(error=f"the code timed out after {timeout_s:g}s")
    error = answer.get("error") or f"the code exited with code {exit_code} before returning"
    return run(error=str(error))
