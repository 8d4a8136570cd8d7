"""Documents from folders and files into an engine: file reading, roots and the sample corpus.

It sits above the engine (reading files is not retrieval) and below the command line."""
