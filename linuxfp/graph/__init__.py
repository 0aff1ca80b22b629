"""Snapshot → packet-processing graph (pure)."""
from .build import HOOK_CHOICES, build_graph, refreshed
from .model import Graph, IfaceFacts, NeighbourFacts, Pipeline, Skipped, flag_names
from .nodes import Node, Stage, node_named, register, registered
from .present import to_dot, to_text
from .remember import forget_stale
from .shape import HOOKS, Shape
from .tables import Table

__all__ = [
    "HOOK_CHOICES", "HOOKS", "build_graph", "refreshed", "Graph", "IfaceFacts", "NeighbourFacts", "Pipeline", "Skipped",
    "Shape", "Table", "Node", "Stage", "node_named", "register", "registered", "flag_names", "to_dot", "to_text",
    "forget_stale",
]
