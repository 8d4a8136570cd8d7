"""rcpkit.eval — retrieval quality evaluation over RCP (Appendix F).

``metrics`` (nDCG/Recall/MRR/MAP, hit → document mapping), ``datasets`` (BEIR
layout and converters), ``runner`` (drives any engine's ``retrieve``), ``report``
(table, JSON, TREC runs, charts) and ``cli`` (``rcpkit eval``).
"""
