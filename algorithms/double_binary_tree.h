// Two complementary binary trees over the ranks of a communicator, so that a tree collective
// can split its data in two and keep every rank's links busy: a rank that forwards data in one
// tree is a leaf of the other.
//
// Construction. Number the positions 0..n-1 and give position p the label p+1. Tree 0 is the
// in-order tree over the labels 1..n: the root of a label range is the one label in it with the
// most trailing zero bits, its left subtree is the range below it and its right subtree the
// range above. Odd labels (even positions) are therefore leaves, even labels have at least one
// child, and the depth is at most floor(log2 n). Tree 1 is tree 0 with every rank moved up by
// one: rank (p + t) mod n sits at position p of tree t. Interior positions are odd, so the
// interior ranks of tree 0 are the odd ranks and those of tree 1 the even ones (position n-1
// is interior only when n is even, and then it holds rank 0): for n >= 3 no rank is interior
// in both trees, and every rank is a leaf in at least one of them.
#pragma once

namespace chorus {

constexpr int kNumTrees = 2;

// One rank's place in one tree.
struct TreeNode {
  int parent = -1;             // -1 for the root
  int children[2] = {-1, -1};  // the first nchildren entries are valid
  int nchildren = 0;
  int depth = 0;  // edges from the root
};

// The node of rank in tree (0 or 1) over nranks ranks.
TreeNode treeNode(int nranks, int rank, int tree);

// The root rank of tree over nranks ranks.
int treeRoot(int nranks, int tree);

}  // namespace chorus
