#!/bin/bash
#SBATCH -d @PARENT@
echo done
