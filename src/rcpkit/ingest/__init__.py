"""Documents from folders and files into an engine: file reading, roots, the sample corpus
and the folder watcher.

It sits above the engine (reading files is not retrieval) and below the command line."""
