"""Running benchmarks: specs and their discovery (``registry``), ``@rlbench.benchmark`` (``userbench``), repeats and
seeds with records written per repeat (``runner``), pytest-benchmark files in a child (``pytest_bench``) and cases as
Ray tasks (``fanout``)."""
