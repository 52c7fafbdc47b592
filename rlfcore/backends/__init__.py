"""Training backends beyond the embedded local trainer; each lives in its own subpackage and imports
its engine only when used, so ``rlfcore`` itself never depends on one."""
