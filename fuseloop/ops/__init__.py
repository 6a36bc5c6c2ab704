"""Operations beyond elementwise: shape, indexing, reductions, contractions."""
