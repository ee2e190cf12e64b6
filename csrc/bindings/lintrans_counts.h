// The operation counts of a native linear transform as a Python dict (shared by the single and batched
// transforms' bindings).
#pragma once

#include <pybind11/pybind11.h>

#include "boot/lintrans.h"

namespace hemlp {

inline pybind11::dict lintrans_counts_dict(const LinTransCounts& c) {
  pybind11::dict d;
  d["modup"] = c.modups;
  d["inner_product"] = c.inner_products;
  d["moddown"] = c.moddowns;
  d["pmult"] = c.pmults;
  d["rescale"] = c.rescales;
  return d;
}

}  // namespace hemlp
