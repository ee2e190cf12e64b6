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
    # Compilers to try, in order: $HEMLP_CORE_CXX, the distribution's /usr/bin/g++, PATH's g++, then $CXX linking its
    # C++ library statically with that copy's symbols hidden. The lent image points CXX at a GCC of its own (/opt/gcc)
    # whose link left libstdc++ out of the extension's dependencies; that extension crashed at its first ostream use
    # (Params::describe) beside the process's other libstdc++. Each build is --force (build/lib may hold an extension
    # linked otherwise) and kept only if it links libstdc++ dynamically (or hides its static copy) and survives a probe.
    try_build() {  # try_build CXX CC LDFLAGS_EXTRA NEEDS_DYNAMIC_LIBSTDCXX
      local cxx="$1" cc="$2" ld="$3" dyn="$4"
      [ -x "$cxx" ] || { echo "gpu_core_deps: no compiler at '$cxx'"; return 1; }
      echo "gpu_core_deps: building with $cxx ($("$cxx" --version | head -1))${ld:+ LDFLAGS+=$ld}"
      rm -f hemlp/_core*.so
      CC="$cc" CXX="$cxx" LDFLAGS="${LDFLAGS:-}${ld:+ $ld}" HEMLP_BUILD_JOBS="${HEMLP_BUILD_JOBS:-$(nproc)}" \
        python3 setup.py -q build_ext --inplace --force 2>&1 | grep -v -E '^(running|copying)' | tail -20 || true
      local so; so="$(ls hemlp/_core*.so 2>/dev/null | head -1 || true)"
      [ -n "$so" ] || { echo "gpu_core_deps: the build wrote no hemlp/_core*.so"; return 1; }
      ldd "$so" | grep -E 'libstdc|libgomp|libgcc|not found' || true
      if [ "$dyn" = 1 ] && ! ldd "$so" | grep -q 'libstdc++\.so'; then
        echo "gpu_core_deps: $so does not link libstdc++ dynamically (a static copy beside another crashes)"; return 1
      fi
      # the first calls that crashed before: the parameter description (ostream) and an encryption round trip
      if ! python3 -c "
from hemlp import fhe; import numpy as np
ctx = fhe.Context('test-N12', allow_insecure=True); sk, pk = ctx.keygen(); z = np.linspace(-1, 1, ctx.slots)
assert np.max(np.abs(ctx.decrypt(ctx.encrypt(z, pk), sk).real - z)) < 1e-3; print(ctx.params)" >/dev/null; then
        echo "gpu_core_deps: the core built with $cxx fails its probe"; return 1
      fi
      echo "gpu_core_deps: hemlp._core built with $cxx and passed its probe"
    }
    built=0
    for cand in "${HEMLP_CORE_CXX:-}" /usr/bin/g++ "$(command -v g++ || true)"; do
      [ -n "$cand" ] || continue
      case " ${tried:-} " in *" $cand "*) continue ;; esac
      tried="${tried:-} $cand"
      cc="${HEMLP_CORE_CC:-$(dirname "$cand")/gcc}"
      if try_build "$cand" "$cc" "" 1; then built=1; break; fi
    done
    if [ "$built" = 0 ] && [ -n "${CXX:-}" ]; then
      try_build "$(command -v "${CXX%% *}" || echo "$CXX")" "$(command -v "${CC:-gcc}" || echo gcc)" \
        "-static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL" 0 && built=1
    fi
    [ "$built" = 1 ] || { rm -f hemlp/_core*.so; echo "gpu_core_deps: no compiler here gave a working core"; exit 5; }
    echo "gpu_core_deps: before using it: export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ;;
  *)
    echo "usage: scripts/gpu_core_deps.sh fetch|build"; exit 2 ;;
esac
