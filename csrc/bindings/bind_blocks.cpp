// The Ray runtime's ciphertext blocks: one polynomial part of many ciphertexts as a limb-major array (Ray's object
// store holds these), and ciphertexts back from the two parts of a block, each in one native copy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "bindings/engine.h"
#include "ckks/errors.h"
// after the ckks headers: its templates name hemlp::Encoding
#include "bindings/convert.h"

namespace py = pybind11;
using namespace hemlp;
using namespace hemlp::bind;

void bind_blocks(py::module_& m) {
  // One part of many ciphertexts into a limb-major (limbs, count, N) array (or a view with contiguous rows):
  // the Ray runtime's block layout, in one native copy.
  m.def(
      "export_part",
      [](std::vector<const Ciphertext*> cts, int part, py::array out) {
        if (part != 0 && part != 1) throw py::value_error("export_part: part is 0 (c0) or 1 (c1)");
        if (!py::isinstance<py::array_t<uint64_t>>(out) || !out.writeable() || out.ndim() != 3)
          throw py::value_error("export_part: out must be a writable uint64 array (limbs, ciphertexts, N)");
        const size_t count = cts.size();
        if (static_cast<size_t>(out.shape(1)) != count)
          throw py::value_error("export_part: out holds " + std::to_string(out.shape(1)) + " ciphertexts, got " +
                                std::to_string(count));
        if (count == 0) return;
        const int limbs = static_cast<int>(out.shape(0));
        const size_t n = static_cast<size_t>(out.shape(2));
        for (const Ciphertext* c : cts) {
          if (c == nullptr) throw py::value_error("export_part: a ciphertext is None");
          if (c->size() != 2 || c->level + 1 != limbs || c->polys[part].size() != (size_t)limbs * n)
            throw py::value_error("export_part: every ciphertext must be relinearised (size 2) at level " +
                                  std::to_string(limbs - 1) + " with N = " + std::to_string(n));
        }
        if ((n > 1 && out.strides(2) != 8) || out.strides(1) % 8 != 0 || out.strides(0) % 8 != 0)
          throw py::value_error("export_part: out must have contiguous rows of N residues");
        const py::ssize_t s0 = out.strides(0) / 8, s1 = out.strides(1) / 8;
        auto* base = static_cast<uint64_t*>(out.mutable_data());
        py::gil_scoped_release nogil;
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)count; ++i)
          for (int k = 0; k < limbs; ++k)
            std::memcpy(base + k * s0 + i * s1, cts[i]->polys[part].data() + (size_t)k * n, n * sizeof(uint64_t));
      },
      py::arg("cts"), py::arg("part"), py::arg("out"));

  // The inverse: R x C ciphertexts (row-major) from the two parts of a block, each a (limbs, R, C, N) uint64 array
  // or view whose rows of N residues are contiguous (Ray's object store, read in place). One native copy per
  // polynomial, the residue-range check fused into it (a corrupted block is a SerializationError, as a file).
  m.def(
      "cts_from_parts",
      [](const Engine& e, py::array p0, py::array p1, int level, double scale, int slots, Encoding encoding,
         bool is_complex, uint64_t key_id) {
        check_imported_metadata(e.ctx, level, scale, slots, (int)encoding, "ciphertext block");
        const size_t n = e.ctx.n();
        const int limbs = level + 1;
        std::array<py::array, 2> parts{p0, p1};
        for (auto& a : parts) {
          if (!py::isinstance<py::array_t<uint64_t>>(a) || a.ndim() != 4 || a.shape(0) != limbs ||
              static_cast<size_t>(a.shape(3)) != n || a.shape(1) != parts[0].shape(1) ||
              a.shape(2) != parts[0].shape(2))
            fail(ErrorKind::Serialization, "ciphertext block: expected two uint64 arrays (" + std::to_string(limbs) +
                                               ", rows, cols, " + std::to_string(n) + ") of the same shape");
          if ((n > 1 && a.strides(3) != 8) || a.strides(0) % 8 || a.strides(1) % 8 || a.strides(2) % 8)
            fail(ErrorKind::Serialization, "ciphertext block: rows of N residues must be contiguous");
        }
        const size_t R = static_cast<size_t>(p0.shape(1)), C = static_cast<size_t>(p0.shape(2));
        std::array<const uint64_t*, 2> bases{};
        std::array<std::array<py::ssize_t, 3>, 2> st{};  // element strides of (limb, row, col)
        for (int j = 0; j < 2; ++j) {
          bases[j] = static_cast<const uint64_t*>(parts[j].data());
          for (int d = 0; d < 3; ++d) st[j][d] = parts[j].strides(d) / 8;
        }
        std::vector<Ciphertext> out(R * C);
        int bad = 0;
        {
          py::gil_scoped_release nogil;
#pragma omp parallel for schedule(static) reduction(| : bad)
          for (long idx = 0; idx < (long)(R * C); ++idx) {
            const py::ssize_t r = idx / (long)C, c = idx % (long)C;
            Ciphertext& ct = out[idx];
            set_imported_metadata(ct, e.ctx, key_id, level, scale, slots, (int)encoding);
            ct.is_complex = is_complex;
            ct.polys.assign(2, Poly((size_t)limbs * n));
            for (int j = 0; j < 2; ++j) {
              for (int k = 0; k < limbs; ++k) {
                const uint64_t* src = bases[j] + k * st[j][0] + r * st[j][1] + c * st[j][2];
                uint64_t* dst = ct.polys[j].data() + (size_t)k * n;
                const uint64_t q = e.ctx.modulus(k).q;
                uint64_t over = 0;
                for (size_t i = 0; i < n; ++i) {
                  dst[i] = src[i];
                  over |= (uint64_t)(src[i] >= q);
                }
                bad |= (int)over;
              }
            }
          }
        }
        if (bad) fail(ErrorKind::Serialization, "ciphertext block: residue out of range; the data is corrupted");
        return out;
      },
      py::arg("engine"), py::arg("part0"), py::arg("part1"), py::arg("level"), py::arg("scale"), py::arg("slots"),
      py::arg("encoding"), py::arg("is_complex"), py::arg("key_id"));
}
