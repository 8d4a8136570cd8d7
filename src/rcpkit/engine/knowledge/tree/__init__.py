"""The engine's RAPTOR-style summary tree (§7.7.2 ``unit: "tree-node"``): recursive k-means
over the chunk vectors, extractive summaries, pinned to the record's snapshots."""

from rcpkit.engine.knowledge.tree.component import TREE_FILE, SummaryTree, TreeHit, TreeLevels

__all__ = ["TREE_FILE", "SummaryTree", "TreeHit", "TreeLevels"]
