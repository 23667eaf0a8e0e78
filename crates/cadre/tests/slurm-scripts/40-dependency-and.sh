#!/bin/bash
#SBATCH --dependency=afterok:@PARENT@:@PARENT2@,afterany:@PARENT@
echo done
