// oracle.cu: (being written)
