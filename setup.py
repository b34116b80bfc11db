"""pyproject.toml holds the project's metadata; this says what it cannot: ``conf/`` and ``results/paper/`` travel
inside the ``harness`` package of a wheel, where an installed tool reads them (``harness/locations.py``)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["common*", "harness*", "algorithms*", "tasks*"]), "harness.conf",
              "harness.paper"],
    package_dir={"harness.conf": "conf", "harness.paper": "results/paper"},
    package_data={"harness.conf": ["**/*.yaml"], "harness.paper": ["paper_numbers.csv", "fig1b_seed_dynamics.json"],
                  # GSM8K (MIT, OpenAI), the default of conf/task/gsm8k.yaml (task.data_dir: null)
                  "tasks.llm": ["data/gsm8k/*.jsonl.gz", "data/gsm8k/LICENSE"]},
)
