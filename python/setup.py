"""Builds the extension hmr._hmr (CPython's limited API of 3.11: one _hmr.abi3.so for 3.11 and
later) against an hmr that is already built or installed.  Which one, in this order:

  HMR_BUILD_DIR=<cmake build dir>   libhmr.so of that build, headers from this source tree
  HMR_PREFIX=<install prefix>       <prefix>/include and <prefix>/lib[/<multiarch>]
  pkg-config hmr                    an installed hmr (libhmr-dev, or PKG_CONFIG_PATH)
  ../build                          the source tree's own build (scripts/test.sh makes it)

The module gets a RUNPATH to that library directory, so it loads the libhmr it was built
with.  Offline on Debian 12:  /usr/bin/python3 -m pip install --no-build-isolation ./python
(docs/python.md)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
SOURCE_TREE = HERE.parent
LIMITED_API = "0x030B0000"  # 3.11: the first limited API with the buffer protocol


def _pkg_config(*args):
    if not shutil.which("pkg-config"):
        return None
    try:
        out = subprocess.run(["pkg-config", *args, "hmr"], check=True, capture_output=True,
                             text=True).stdout
    except subprocess.CalledProcessError:
        return None
    return out.split()


def _library_dir_of(prefix):
    for candidate in sorted(prefix.glob("lib*/**/libhmr.so*")):
        return candidate.parent
    sys.exit(f"setup.py: no libhmr.so under {prefix}/lib*")


def find_hmr():
    """(include_dirs, library_dirs, how) of the hmr to build against."""
    build = os.environ.get("HMR_BUILD_DIR")
    prefix = os.environ.get("HMR_PREFIX")
    if build:
        build_dir = Path(build)
        # pip runs this file from python/: a relative path may mean the source tree's.
        if not build_dir.is_absolute() and not (build_dir / "libhmr.so").exists():
            build_dir = SOURCE_TREE / build_dir
        build_dir = build_dir.resolve()
        if not (build_dir / "libhmr.so").exists():
            sys.exit(f"setup.py: HMR_BUILD_DIR={build}: no libhmr.so there (build it first)")
        return [str(SOURCE_TREE / "include")], [str(build_dir)], f"build {build_dir}"
    if prefix:
        root = Path(prefix).resolve()
        return [str(root / "include")], [str(_library_dir_of(root))], f"prefix {root}"
    cflags, libs = _pkg_config("--cflags-only-I"), _pkg_config("--libs-only-L")
    if cflags is not None and libs is not None:
        includes = [flag[2:] for flag in cflags]
        libdirs = [flag[2:] for flag in libs]
        if not libdirs:  # a system directory: pkg-config leaves it out
            libdirs = [_pkg_config("--variable=libdir")[0]]
        return includes, libdirs, "pkg-config hmr"
    default_build = SOURCE_TREE / "build"
    if (default_build / "libhmr.so").exists() and (SOURCE_TREE / "include/hmr/hmr.h").exists():
        return [str(SOURCE_TREE / "include")], [str(default_build)], f"build {default_build}"
    sys.exit("setup.py: no hmr found: set HMR_BUILD_DIR to a cmake build directory, "
             "HMR_PREFIX to an install prefix, or install libhmr-dev (pkg-config hmr)")


include_dirs, library_dirs, how = find_hmr()
print(f"setup.py: building hmr._hmr against the hmr of {how} ({library_dirs[0]})",
      file=sys.stderr)

setup(
    ext_modules=[
        Extension(
            "hmr._hmr",
            sources=[f"src/{name}.c" for name in
                     ("module", "errors", "source", "domain", "region", "remote_key",
                      "endpoint", "numbers")],
            include_dirs=include_dirs,
            library_dirs=library_dirs,
            runtime_library_dirs=library_dirs,
            libraries=["hmr"],
            define_macros=[("Py_LIMITED_API", LIMITED_API)],
            extra_compile_args=["-std=gnu11", "-fvisibility=hidden"],
            py_limited_api=True,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
