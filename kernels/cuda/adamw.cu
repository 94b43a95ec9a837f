// adamw.cu: (being written)
