// indexer.cu: (being written)
