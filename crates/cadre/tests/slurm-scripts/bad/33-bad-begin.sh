#!/bin/bash
# known: message Slurm's time parser prints a diagnostic line of its own (`Invalid time specification (pos=0): foo`) before sbatch's error; cadre prints only the error
#SBATCH --begin=foo
echo done
