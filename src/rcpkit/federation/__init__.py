"""Federation (§16): engine registry, replica failover, fan-out/fusion and the gateway."""

from .federation import DEFAULT_DEPTH, FUSION_METHODS, Federation, Hop
from .gateway import GatewayServer, build_gateway
from .registry import EngineGroup, EngineSpec, Registry, RegistryError, load_registry
from .selector import Selector, connect_engine

__all__ = ["DEFAULT_DEPTH", "FUSION_METHODS", "EngineGroup", "EngineSpec", "Federation",
           "GatewayServer", "Hop", "Registry", "RegistryError", "Selector", "build_gateway",
           "connect_engine", "load_registry"]
