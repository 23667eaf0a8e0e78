#!/bin/bash
#SBATCH --foo
echo done
