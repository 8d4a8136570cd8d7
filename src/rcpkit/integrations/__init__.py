"""Bridges from RCP engines to the frameworks applications already use.

- :mod:`rcpkit.integrations.mcp` — any RCP engine as an MCP server (``rcpkit mcp``);
- :mod:`rcpkit.integrations.langchain` — a LangChain ``BaseRetriever``;
- :mod:`rcpkit.integrations.llama_index` — a LlamaIndex ``BaseRetriever``;
- :mod:`rcpkit.integrations.haystack` — a Haystack retriever component.

Each needs its framework's own package, installed by an extra (``rcpkit[mcp]``,
``rcpkit[langchain]``, ``rcpkit[llama-index]``, ``rcpkit[haystack]``); nothing here imports
one until used.
:mod:`rcpkit.integrations.engines` opens the engine a bridge talks to.
"""
