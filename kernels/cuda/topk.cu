// topk.cu: (being written)
