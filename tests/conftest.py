"""Oracle tests run in float64; float32 tests ask for float32 explicitly."""
import jax

jax.config.update("jax_enable_x64", True)
