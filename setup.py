"""Maps the top-level tasks/ and rewards/ folders into the package as mmreason.tasks / mmreason.rewards."""

from setuptools import find_packages, setup

MAPPED = {"mmreason": "mmreason", "mmreason.tasks": "tasks", "mmreason.rewards": "rewards"}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = [], {}
    for name, folder in MAPPED.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_packages(where=folder):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir)
