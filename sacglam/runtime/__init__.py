"""What every pipeline component shares, below all of them: one calling convention for a component
in this process or in a Ray actor (`handles`), and the checkpoint store (`checkpoint`)."""
