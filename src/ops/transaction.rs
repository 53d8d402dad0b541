//! Transactions read tensors that all belong to `C`: the transaction is handed over as is.

use crate::{Accelerator, Hetero};
use burn_backend::ops::{TransactionOps, TransactionPrimitive, TransactionPrimitiveData};
use burn_backend::{Backend, ExecutionError};

impl<C: Backend, A: Accelerator> TransactionOps<Self> for Hetero<C, A> {
    async fn tr_execute(
        transaction: TransactionPrimitive<Self>,
    ) -> Result<TransactionPrimitiveData, ExecutionError> {
        #[cfg(feature = "trace-ops")]
        crate::trace::hit("TransactionOps::tr_execute");
        // The primitives are `C`'s own; only the type parameter of the container changes.
        let forwarded = TransactionPrimitive::<C>::new(
            transaction.read_floats,
            transaction.read_qfloats,
            transaction.read_ints,
            transaction.read_bools,
        );
        C::tr_execute(forwarded).await
    }
}
