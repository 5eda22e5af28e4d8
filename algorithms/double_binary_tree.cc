#include "algorithms/double_binary_tree.h"

namespace chorus {

namespace {

// The label in [lo, hi] (1 <= lo <= hi) with the most trailing zero bits; it is unique, since
// two such labels would enclose a multiple of a higher power of two.
int rangeRoot(int lo, int hi) {
  for (int bit = 30; bit > 0; --bit) {
    long long step = 1ll << bit;
    long long candidate = (lo + step - 1) / step * step;
    if (candidate <= hi) return static_cast<int>(candidate);
  }
  return lo;
}

int rankOfLabel(int label, int nranks, int tree) {
  return (label - 1 + tree) % nranks;
}

}  // namespace

TreeNode treeNode(int nranks, int rank, int tree) {
  TreeNode node;
  if (nranks <= 1) return node;
  const int label = (rank - tree % nranks + nranks) % nranks + 1;
  // Walk down from the root, narrowing the range that holds label.
  int lo = 1, hi = nranks;
  int parentLabel = 0;
  while (true) {
    int root = rangeRoot(lo, hi);
    if (root == label) break;
    parentLabel = root;
    ++node.depth;
    if (label < root)
      hi = root - 1;
    else
      lo = root + 1;
  }
  if (parentLabel != 0) node.parent = rankOfLabel(parentLabel, nranks, tree);
  if (lo <= label - 1)
    node.children[node.nchildren++] = rankOfLabel(rangeRoot(lo, label - 1), nranks, tree);
  if (label + 1 <= hi)
    node.children[node.nchildren++] = rankOfLabel(rangeRoot(label + 1, hi), nranks, tree);
  return node;
}

int treeRoot(int nranks, int tree) {
  if (nranks <= 1) return 0;
  return rankOfLabel(rangeRoot(1, nranks), nranks, tree);
}

}  // namespace chorus
