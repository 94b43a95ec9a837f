// sparse_attention.cu: (being written)
