"""Snapshot → packet-processing graph (pure)."""
from .build import HOOK_CHOICES, build_graph, local_source_addresses, needs_full_source_check
from .model import Graph, IfaceFacts, NeighbourFacts, Pipeline, Skipped, flag_names
from .present import to_dot, to_text

__all__ = [
    "HOOK_CHOICES", "build_graph", "local_source_addresses", "needs_full_source_check",
    "Graph", "IfaceFacts", "NeighbourFacts", "Pipeline", "Skipped", "flag_names", "to_dot", "to_text",
]
