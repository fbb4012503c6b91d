"""JAX: jax-single and jax-dp on the Flax (Linen) twins of dlscale's models."""
