// Layout facts of NVIDIA's nccl.h (from the CUDA toolkit); compare_layout.sh diffs them against
// layout_ours.cc.
#include <nccl.h>

#ifdef CHORUS_NCCL_H_
#error "layout_nvidia must be built against NVIDIA's nccl.h, not Chorus's"
#endif

#include "layout_print.h"

int main() {
  return layout::printAll();
}
