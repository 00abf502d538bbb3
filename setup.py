"""Package layout: envs/, trainers/ and memory/ sit at the top of the repository but import as
agentgym.envs, agentgym.trainers and agentgym.memory (metadata lives in pyproject.toml)."""

from setuptools import find_packages, setup

PACKAGE_ROOTS = {
    "agentgym": "agentgym",
    "agentgym.envs": "envs",
    "agentgym.trainers": "trainers",
    "agentgym.memory": "memory",
}


def mapped_packages() -> list[str]:
    packages = []
    for name, path in PACKAGE_ROOTS.items():
        packages.append(name)
        packages += [f"{name}.{sub}" for sub in find_packages(path)]
    return packages


setup(
    packages=mapped_packages(),
    package_dir=PACKAGE_ROOTS,
    package_data={"agentgym.envs.code": ["tasks/**/*"], "agentgym.sandbox": ["images/*"],
                  "agentgym.rollout": ["templates/*"]},
)
