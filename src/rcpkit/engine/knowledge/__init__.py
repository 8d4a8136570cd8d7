"""The knowledge surfaces over the core pipeline (§7.8-§7.10, §7.17): the concept graph,
hierarchical units, memory, query transforms and the language model they may call."""
