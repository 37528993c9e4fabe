# tests/data/ holds test files that the package's tests capture (one has an op the language
# lacks, one a bug the mirror proof must catch); they are not tests of this suite.
collect_ignore_glob = ["data/*"]
