"""The engine's knowledge graph (§7.9): concepts extracted without an LLM, co-occurrence,
personalised PageRank and hierarchical communities, pinned to the record's snapshots."""

from rcpkit.engine.knowledge.graph.component import (
    GRAPH_FILE,
    ConceptGraph,
    GraphHit,
    GraphNode,
    Neighborhood,
    RankedCommunity,
)
from rcpkit.engine.knowledge.graph.concepts import Concept, ConceptExtractor

__all__ = ["GRAPH_FILE", "Concept", "ConceptExtractor", "ConceptGraph", "GraphHit",
           "GraphNode", "Neighborhood", "RankedCommunity"]
