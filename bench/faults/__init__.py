"""The fault harness: real dev server, worker subprocesses and runs, with faults injected.

Run it with `python -m bench.faults.run [--short]`; see `bench.faults.run` for the scenarios.
"""
