#!/usr/bin/env bash
# Build hemlp's CPU core (hemlp._core) on a machine that has a compiler and Python but none of the core's build
# dependencies and no network (a lent GPU machine: GPU bootstrapping takes its plans, keys and diagonals from the
# CPU core, and the live bit-exactness tests compare with it).
#   scripts/gpu_core_deps.sh fetch   here (Debian, apt): the OpenBLAS, OpenSSL and pkgconf packages into .debs/
#                                    (about 17 MB; ignored by git: carry it)
#   scripts/gpu_core_deps.sh build   there: unpack them into $HEMLP_DEPS_PREFIX (default /tmp/hemlp-deps) and build
#                                    the extension in place against that prefix; prints the environment to export
#                                    (LD_LIBRARY_PATH) before importing hemlp._core
# Needs, there: python3 with its headers (Python.h, or the same minor version's in .pyinc/pythonX.Y), numpy and
# pybind11; g++ (or $CXX); dpkg-deb.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 libssl-dev libssl3 pkgconf pkgconf-bin libpkgconf3"
PREFIX="${HEMLP_DEPS_PREFIX:-/tmp/hemlp-deps}"
LIBS="$PREFIX/usr/lib/x86_64-linux-gnu"
case "${1:-}" in
  fetch)
    mkdir -p .debs
    grep -qx '/.debs/' .git/info/exclude 2>/dev/null || echo /.debs/ >> .git/info/exclude
    (cd .debs && apt-get download $PKGS 2>&1 | grep -v "unsandboxed" || true)
    ls -la .debs
    ;;
  build)
    ls .debs/*.deb >/dev/null 2>&1 || { echo "gpu_core_deps: no .debs/ here (run 'fetch' where apt works, carry .debs)"; exit 2; }
    PYINC="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
    if [ ! -f "$PYINC/Python.h" ]; then
      # headers of the same minor version carried in .pyinc/pythonX.Y (the ABI is the minor version's)
      carried="$PWD/.pyinc/$(basename "$PYINC")"
      [ -f "$carried/Python.h" ] || { echo "gpu_core_deps: no Python.h in $PYINC nor in $carried: carry this" \
        "python's headers there (e.g. a pyenv or python-build-standalone include/pythonX.Y folder)"; exit 3; }
      export CFLAGS="-I$carried${CFLAGS:+ $CFLAGS}"
      echo "gpu_core_deps: using the carried headers in $carried"
    fi
    mkdir -p "$PREFIX"
    for d in .debs/*.deb; do dpkg-deb -x "$d" "$PREFIX"; done
    # the unpacked .pc files say prefix=/usr: the sysroot makes every -I/-L point into the prefix
    export PKG_CONFIG_SYSROOT_DIR="$PREFIX"
    export PKG_CONFIG_LIBDIR="$LIBS/pkgconfig:$LIBS/openblas-pthread/pkgconfig:$PREFIX/usr/share/pkgconfig"
    export LD_LIBRARY_PATH="$LIBS:$LIBS/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ! command -v pkg-config >/dev/null; then
      ln -sf pkgconf "$PREFIX/usr/bin/pkg-config"
      export PATH="$PREFIX/usr/bin:$PATH"
    fi
    pkg-config --cflags --libs openblas libcrypto
    # The system compilers of PATH, not $CC / $CXX: the lent image points CXX at a GCC of its own (/opt/gcc) whose
    # links leave libstdc++ out of the extension's dependencies, and that extension crashed at its first ostream
    # use (Params::describe) beside numpy's libstdc++. --force: build/lib may hold an extension linked otherwise.
    CC="${HEMLP_CORE_CC:-$(command -v gcc)}" CXX="${HEMLP_CORE_CXX:-$(command -v g++)}" \
      HEMLP_BUILD_JOBS="${HEMLP_BUILD_JOBS:-$(nproc)}" python3 setup.py -q build_ext --inplace --force 2>&1 \
      | grep -v -E '^(running|copying)' || true
    so="$(ls hemlp/_core*.so 2>/dev/null | head -1)"
    [ -n "$so" ] || { echo "gpu_core_deps: the build wrote no hemlp/_core*.so"; exit 4; }
    if ! ldd "$so" | grep -q 'libstdc++\.so'; then
      echo "gpu_core_deps: $so does not link libstdc++ dynamically (a static copy beside numpy's crashes); build with" \
        "a system g++: HEMLP_CORE_CXX=/usr/bin/g++ HEMLP_CORE_CC=/usr/bin/gcc"; exit 5
    fi
    python3 -c "import hemlp._core" && echo "gpu_core_deps: hemlp._core built; before using it: export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ;;
  *)
    echo "usage: scripts/gpu_core_deps.sh fetch|build"; exit 2 ;;
esac
