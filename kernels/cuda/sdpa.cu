// sdpa.cu: (being written)
