"""FedPG baseline: compiled local epochs against the NumPy reference, and its fixed point."""

import numpy as np
import pytest

from fedep.core.fedpg import FedPGCohort, FedPGSettings
from fedep.core.stiefel import polar, projector_distance, random_stiefel
from fedep.data import make_federated_data
from fedep.federation.server import server_round


def _blocks(seed=0, n_clients=7):
    D = make_federated_data(
        n_clients=n_clients, n_features=10, n_components=3, n_samples=(20, 70), random_state=seed
    )
    return [D.X_train[D.groups_train == i] for i in range(n_clients)]


def test_compiled_local_epochs_match_numpy_reference():
    blocks = _blocks()
    V0 = random_stiefel(10, 3, np.random.default_rng(1))
    runs = {}
    for kernel in ("numpy", "numba"):
        coh = FedPGCohort(
            blocks,
            V0,
            FedPGSettings(
                lr=None, rho=0.01, local_epochs=7, consensus_weights="uniform", kernel=kernel
            ),
        )
        V = V0
        for k in range(5):
            clients = None if k % 2 == 0 else np.array([1, 4, 5])
            rep = coh.local_round(V, clients)
            V, _ = server_round("fedpg", rep, V)
        runs[kernel] = (coh, V)
    (a, Va), (b, Vb) = runs["numpy"], runs["numba"]
    assert np.allclose(Va, Vb, atol=1e-10)
    assert np.allclose(a.W, b.W, atol=1e-10) and np.allclose(a.Y, b.Y, atol=1e-10)
    assert np.allclose(np.swapaxes(b.W, 1, 2) @ b.W, np.eye(3), atol=1e-12)


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_one_client_converges_to_its_top_subspace(kernel):
    X = np.random.default_rng(2).standard_normal((200, 8)) * 0.7 ** np.arange(8)
    V = random_stiefel(8, 2, np.random.default_rng(3))
    coh = FedPGCohort(
        [X],
        V,
        FedPGSettings(
            lr=None, rho=0.01, local_epochs=30, consensus_weights="uniform", kernel=kernel
        ),
    )
    for _ in range(300):
        V, _ = server_round("fedpg", coh.local_round(V), V)
    top = np.linalg.svd(X, full_matrices=False)[2][:2].T
    assert projector_distance(polar(V), top) <= 1e-6
